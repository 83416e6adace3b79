"""Hot-path statements: written in Core, compiled once per dialect, run on the driver's cursor.

Why: a model turn and a tool call make about ten statements in three transactions, and
building, cache-keying and post-processing a Core statement costs SQLAlchemy 50-250 µs each —
more than SQLite takes to run it. These statements are still Core (the schema stays the one
source of truth, the SQL is what `Connection.execute` would send); what is skipped is only the
per-call work: the SQL is compiled once, parameters and results pass through the very type
processors SQLAlchemy would apply (JSON, SQLite's datetimes), and a driver error is handed to
the connection's own error handling, so it is raised as the same `DBAPIError` and a lost
connection invalidates the pool exactly as with `Connection.execute`. (Not seen by these
statements: SQLAlchemy's cursor-execute events and ``echo`` logging; nothing here uses them.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import CompoundSelect, Connection, Dialect, Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

_Processor = Callable[[Any], Any] | None
Params = tuple[Any, ...] | dict[str, Any]


class Prepared:
    """One statement compiled for ``dialect``, with its bind and result processors."""

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        # The parameters the SQL names, as `SQLCompiler.construct_params` finds them:
        # ``bind_names`` maps each bind to the name rendered in the SQL. (Not ``binds``: it is
        # keyed by the binds' keys too, which for anonymous ones (LIMIT 1) are internal names
        # such as '%(1234 param)s' next to the rendered 'param_1'.)
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        self._positional = bool(dialect.positional)
        names = list(compiled.positiontup or ()) if self._positional else list(by_name)
        binds = [by_name[name] for name in names]
        #: The driver's name of each parameter (named paramstyles), escaped as in the SQL.
        escaped = compiled.escaped_bind_names
        self._names = tuple(escaped.get(name, name) for name in names)
        #: Where each parameter's value comes from: the caller's values, by the bind's key.
        self._keys = tuple(bind.key for bind in binds)
        self._binds = tuple(
            bind.type.dialect_impl(dialect).bind_processor(dialect) for bind in binds
        )
        # Values of binds the statement carries itself (LIMIT 1 and the like).
        self._fixed = {bind.key: bind.value for bind in binds if not bind.required}
        selects = (Select, CompoundSelect)
        columns = statement.selected_columns if isinstance(statement, selects) else ()
        processors = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]
        self._results: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (index, processor) for index, processor in enumerate(processors) if processor
        )

    def params(self, values: Mapping[str, Any]) -> Params:
        """The driver's parameters (positional or named, as its paramstyle wants)."""
        fixed = self._fixed
        processed = [
            _process(processor, values[key] if key not in fixed else fixed[key])
            for key, processor in zip(self._keys, self._binds, strict=True)
        ]
        if self._positional:
            return tuple(processed)
        return dict(zip(self._names, processed, strict=True))

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run with ``values``; the rows it returns, their columns converted as Core would."""
        found = run(conn, self.sql, self.params(values))
        if not self._results:
            return found
        converted = []
        for row in found:
            values_ = list(row)
            for index, processor in self._results:
                values_[index] = processor(values_[index])
            converted.append(tuple(values_))
        return converted

    def run_many(self, conn: Connection, values: Sequence[Mapping[str, Any]]) -> None:
        """One ``executemany`` of this statement (no rows returned)."""
        run(conn, self.sql, [self.params(one) for one in values], many=True)


def _process(processor: _Processor, value: Any) -> Any:
    return value if processor is None else processor(value)


def run(conn: Connection, sql: str, params: Any, *, many: bool = False) -> list[tuple[Any, ...]]:
    """Execute on a cursor of ``conn``'s driver connection (in its transaction); the rows, if
    the statement returns any."""
    cursor = conn.connection.cursor()
    try:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
        found = list(cursor.fetchall()) if cursor.description is not None else []
    except BaseException as error:
        # What `Connection.execute` does with a driver error (it closes the cursor): wrap it,
        # and on a disconnect invalidate the connection and the pool. Private API, used for
        # exactly that reason: a store outage must look the same whichever path met it.
        conn._handle_dbapi_exception(error, sql, params, cursor, None)
    cursor.close()
    return found
