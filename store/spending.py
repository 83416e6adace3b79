"""What partitions spend on model calls, and their spend limits, shared by the fleet.

Each model call adds its tokens and cost to one row of `spend` (partition, UTC day, agent,
model profile), in the transaction that stores the call's answer: a retried activity that
finds the answer stored adds nothing, so a call is counted once. A partition's limit per day
(`spend_limits`) is checked by every worker against that day's rows before a run starts and
before each model call; the day is read from the store's clock (`SpendStore.clock`), which a
test may replace to cross midnight.

Amounts are kept as integer pico-dollars (10^-12 USD): exact on SQLite and PostgreSQL alike
(SQLite has no exact decimal type). `Decimal` dollars go in and come out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal

from sqlalchemy import Connection, Engine, and_, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from otherone.run_types import plain_decimal
from otherone.store.schema import spend, spend_limits

PICOS_PER_DOLLAR = Decimal(10) ** 12
#: The periods a limit may be set for.
PERIODS = ("day",)
#: The columns `usage` can group by (besides the sums).
GROUPINGS = ("partition", "agent", "model", "day")
_GROUP_COLUMNS = {
    "partition": spend.c.partition_key,
    "agent": spend.c.agent_id,
    "model": spend.c.model_profile_id,
    "day": spend.c.day,
}


def to_picos(dollars: Decimal) -> int:
    """Dollars as integer pico-dollars (a rest below 10^-12 USD rounded half to even)."""
    return int((dollars * PICOS_PER_DOLLAR).to_integral_value(rounding=ROUND_HALF_EVEN))


def to_dollars(picos: int) -> Decimal:
    return (Decimal(picos) / PICOS_PER_DOLLAR).normalize() if picos else Decimal(0)


def utc_day(moment: datetime) -> str:
    """The UTC day a moment falls on, as `spend` keys it (``2026-12-07``)."""
    return moment.astimezone(UTC).date().isoformat()


@dataclass(frozen=True)
class CallSpend:
    """One model call's usage, as it is added to its partition's day."""

    partition_key: str
    agent_id: str
    model_profile_id: str
    calls: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal = Decimal(0)
    #: Of ``calls``, those whose profile has no prices: their cost is unknown, not 0.
    unpriced_calls: int = 0


@dataclass(frozen=True)
class UsageRow:
    """Summed usage of one group (the keys `usage` grouped by; the others are None)."""

    partition_key: str | None
    agent_id: str | None
    model_profile_id: str | None
    day: str | None
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: Decimal
    #: Calls of unpriced profiles, not in ``cost`` (which is then a lower bound).
    unpriced_calls: int = 0

    @property
    def cost_known(self) -> bool:
        """Whether ``cost`` is what all the calls cost (none of them unpriced)."""
        return self.unpriced_calls == 0

    def as_json(self) -> dict[str, str | int | None]:
        """The row as `otherone usage --json` and `GET /v1/usage` give it (the cost an exact
        decimal string, as in run records; the keys not grouped by are left out)."""
        keys = {
            "partition_key": self.partition_key,
            "agent_id": self.agent_id,
            "model_profile_id": self.model_profile_id,
            "day": self.day,
        }
        return {
            **{name: value for name, value in keys.items() if value is not None},
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost": plain_decimal(self.cost),
            "unpriced_calls": self.unpriced_calls,
        }


def parse_grouping(text: str) -> tuple[str, ...]:
    """``agent,day`` as groupings (`GROUPINGS`); a ValueError naming the bad one."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if name not in GROUPINGS:
            raise ValueError(
                f"by: unknown grouping {name!r} (one or more of {', '.join(GROUPINGS)})"
            )
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class LimitReached:
    """A partition's spend for the period has reached its limit."""

    partition_key: str
    period: str
    limit: Decimal
    spent: Decimal
    day: str

    @property
    def message(self) -> str:
        return (
            f"spend limit per {self.period} of partition '{self.partition_key}' "
            f"({self.limit} USD) reached: {self.spent} USD spent on {self.day} (UTC)"
        )


def _now() -> datetime:
    return datetime.now(UTC)


class SpendStore:
    """The partitions' spend and limits (`Store.spending`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: What "today" is: replaced in tests to cross a day without waiting.
        self.clock: Callable[[], datetime] = _now

    def today(self) -> str:
        return utc_day(self.clock())

    def add(self, conn: Connection, call: CallSpend) -> None:
        """Add ``call`` to its partition's row of today (in the caller's transaction)."""
        values = {
            "partition_key": call.partition_key,
            "day": self.today(),
            "agent_id": call.agent_id,
            "model_profile_id": call.model_profile_id,
            "calls": call.calls,
            "input_tokens": call.input_tokens,
            "output_tokens": call.output_tokens,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            "cost_picos": to_picos(call.cost),
            "unpriced_calls": call.unpriced_calls,
        }
        insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        statement = insert(spend).values(values)
        summed = {
            name: getattr(spend.c, name) + getattr(statement.excluded, name)
            for name in values
            if name not in ("partition_key", "day", "agent_id", "model_profile_id")
        }
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=["partition_key", "day", "agent_id", "model_profile_id"],
                set_=summed,
            )
        )

    def set_limit(self, partition_key: str, period: str, limit: Decimal | None) -> None:
        """Set (or, with None, remove) the partition's limit for ``period``."""
        if period not in PERIODS:
            raise ValueError(f"period: must be one of {', '.join(PERIODS)}, not {period!r}")
        with self._engine.begin() as conn:
            key = and_(
                spend_limits.c.partition_key == partition_key, spend_limits.c.period == period
            )
            conn.execute(delete(spend_limits).where(key))
            if limit is not None:
                conn.execute(
                    spend_limits.insert().values(
                        partition_key=partition_key,
                        period=period,
                        limit_picos=to_picos(limit),
                        updated_at=_now(),
                    )
                )

    def limits(self, partition_key: str) -> dict[str, Decimal]:
        """The partition's limits by period."""
        query = select(spend_limits.c.period, spend_limits.c.limit_picos).where(
            spend_limits.c.partition_key == partition_key
        )
        with self._engine.connect() as conn:
            return {period: to_dollars(picos) for period, picos in conn.execute(query)}

    def limit_reached(self, partition_key: str) -> LimitReached | None:
        """The partition's daily limit, when today's spend has reached it (one query)."""
        day = self.today()
        spent = (
            select(func.coalesce(func.sum(spend.c.cost_picos), 0))
            .where(spend.c.partition_key == partition_key, spend.c.day == day)
            .scalar_subquery()
        )
        query = select(spend_limits.c.limit_picos, spent).where(
            spend_limits.c.partition_key == partition_key, spend_limits.c.period == "day"
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None or int(row[1]) < int(row[0]):
            return None
        return LimitReached(partition_key, "day", to_dollars(row[0]), to_dollars(row[1]), day)

    def usage(
        self,
        *,
        partition_key: str | None = None,
        group_by: tuple[str, ...] = GROUPINGS,
        since: date | None = None,
        until: date | None = None,
    ) -> list[UsageRow]:
        """Summed usage grouped by ``group_by`` (of `GROUPINGS`), of one partition (a
        tenant's view) or all of them (an operator's), optionally between two days."""
        unknown = [name for name in group_by if name not in _GROUP_COLUMNS]
        if unknown:
            raise ValueError(f"group_by: unknown grouping {unknown[0]!r}")
        keys = [_GROUP_COLUMNS[name].label(name) for name in group_by]
        sums = [
            func.sum(getattr(spend.c, name)).label(name)
            for name in (
                "calls",
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "cost_picos",
                "unpriced_calls",
            )
        ]
        query = select(*keys, *sums)
        if partition_key is not None:
            query = query.where(spend.c.partition_key == partition_key)
        if since is not None:
            query = query.where(spend.c.day >= since.isoformat())
        if until is not None:
            query = query.where(spend.c.day <= until.isoformat())
        if keys:
            query = query.group_by(*keys).order_by(*keys)
        with self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_usage_row(row) for row in rows if row["calls"]]


def _usage_row(row: object) -> UsageRow:
    values = dict(row)  # type: ignore[call-overload]
    return UsageRow(
        partition_key=values.get("partition"),
        agent_id=values.get("agent"),
        model_profile_id=values.get("model"),
        day=values.get("day"),
        calls=int(values["calls"]),
        input_tokens=int(values["input_tokens"]),
        output_tokens=int(values["output_tokens"]),
        cache_read_tokens=int(values["cache_read_tokens"]),
        cache_write_tokens=int(values["cache_write_tokens"]),
        cost=to_dollars(int(values["cost_picos"])),
        unpriced_calls=int(values["unpriced_calls"]),
    )
