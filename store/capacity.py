"""Capacity shared by the fleet: permits for model and tool calls, held in the store.

The seed holds every model call behind a runtime-wide semaphore; on a fleet the runtime is every
worker sharing this store, so the permits live here. A *scope* is one limited thing: the fleet's
model calls on a task queue, one model profile (the provider account behind it), one run tree
whose request tightened a limit. Each scope has a row (`capacity_scopes`) whose update
serialises the scope's decisions across workers (a row lock on PostgreSQL, the write lock on
SQLite), and rows of holders (`capacity_holders`):

- ``held``: a call in flight. Its lease (``expires_at``) is renewed while the call runs, so a
  permit whose worker was killed comes back when the lease runs out.
- ``waiting``: a call refused for now. When a permit frees, the release wakes the best ranked
  waiter (the partition with the fewest calls in flight, then the one served longest ago,
  then the oldest waiter) and marks it ``woken``: the permit is kept for it for `WAKE_GRACE`,
  and a call arriving meanwhile queues behind it. A waiter that does not come back in time
  (``expires_at``) is dropped; a call arriving while a permit is free and nobody was woken for
  it takes it (the permit never idles while a caller is there).
- ``spent``: a finished call of a scope with a per-minute limit, kept for the 60 s window.
- ``served``: when a partition was last granted a permit of the scope (one row per partition,
  holder ``~PARTITION``): the round robin between partitions.

A call is admitted in one transaction over all its scopes (locked in name order, so two calls
never wait on each other): all of them grant it or none holds anything. A refusal says how long
to wait: until the window frees (rate limits), a provider's pause ends (a 429's Retry-After), or
a release wakes the caller (concurrency; the caller also comes back on its own after
`WAKE_FALLBACK`). The caller waits in its workflow: no worker slot is held while waiting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from otherone.store.capacity_rules import (
    HELD,
    PERMIT_LEASE,
    SERVED,
    SERVED_MEMORY,
    SPENT,
    WAITER_GRACE,
    WAITING,
    WAKE_FALLBACK,
    WAKE_GRACE,
    WINDOW,
    WOKEN,
    Admission,
    CapacityClaim,
    Row,
    ScopeLimit,
    ScopeView,
    Woken,
    counts,
    free_permits,
    in_lock_order,
    is_expired,
    longest,
    next_in_line,
    refusal,
)
from otherone.store.prepared import Prepared
from otherone.store.schema import capacity_holders, capacity_scopes

Insert = postgresql.Insert | sqlite.Insert


class _Statements:
    """An admission's and a release's statements, compiled once per dialect (`prepared`):
    built as Core statements on each call, SQLAlchemy's own work was most of their cost."""

    def __init__(self, dialect: Dialect) -> None:
        insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        holders = capacity_holders.c
        moment = holders.since.type
        scope = holders.scope == bindparam("scope")
        self.lock = Prepared(
            insert(capacity_scopes)
            .values(scope=bindparam("scope"), decisions=1)
            .on_conflict_do_update(
                index_elements=["scope"],
                set_={"decisions": capacity_scopes.c.decisions + 1},
            )
            .returning(capacity_scopes.c.paused_until),
            dialect,
        )
        self.pause = Prepared(
            select(capacity_scopes.c.paused_until).where(
                capacity_scopes.c.scope == bindparam("scope")
            ),
            dialect,
        )
        columns = (
            holders.holder,
            holders.partition_key,
            holders.workflow_id,
            holders.state,
            holders.since,
            holders.expires_at,
            holders.tokens,
        )
        self.rows = Prepared(select(*columns).where(scope), dialect)
        self.live_rows = Prepared(select(*columns).where(scope, holders.state != SPENT), dialect)
        in_window = holders.since > bindparam("cut", type_=moment)
        counted = select(
            func.count(case((in_window, 1))),
            func.coalesce(func.sum(case((in_window, holders.tokens))), 0),
            func.min(case((in_window, holders.since))),
            func.count(case((~in_window, 1))),
        )
        spent = and_(scope, holders.state == SPENT)
        self.spent = Prepared(counted.where(spent), dialect)
        self.spent_but = Prepared(
            counted.where(spent, holders.holder != bindparam("excluding")), dialect
        )
        self.expired = Prepared(
            delete(capacity_holders).where(
                scope,
                or_(
                    and_(
                        holders.state != SPENT, holders.expires_at <= bindparam("now", type_=moment)
                    ),
                    and_(holders.state == SPENT, holders.since <= bindparam("cut", type_=moment)),
                ),
            ),
            dialect,
        )
        held = insert(capacity_holders).values(
            {
                name: bindparam(name)
                for name in (
                    "scope",
                    "holder",
                    "partition_key",
                    "workflow_id",
                    "state",
                    "since",
                    "expires_at",
                    "tokens",
                )
            }
        )
        self.hold = Prepared(
            held.on_conflict_do_update(
                index_elements=["scope", "holder"],
                set_={
                    name: held.excluded[name] for name in ("state", "since", "expires_at", "tokens")
                },
            ),
            dialect,
        )
        #: A partition's last grant (its ``served`` row): only its time and memory move.
        self.serve = Prepared(
            held.on_conflict_do_update(
                index_elements=["scope", "holder"],
                set_={name: held.excluded[name] for name in ("since", "expires_at")},
            ),
            dialect,
        )
        mine = and_(scope, holders.holder == bindparam("holder_"))
        self.forget = Prepared(delete(capacity_holders).where(mine), dialect)
        # Bind names differ from the columns': an UPDATE keeps those for its SET clause.
        spend = update(capacity_holders).where(mine, holders.state == HELD)
        self.spend = Prepared(
            spend.values(state=SPENT, expires_at=bindparam("until", type_=moment)), dialect
        )
        self.spend_tokens = Prepared(
            spend.values(
                state=SPENT,
                expires_at=bindparam("until", type_=moment),
                tokens=bindparam("used"),
            ),
            dialect,
        )


_STATEMENTS: dict[tuple[str, str], _Statements] = {}


def _statements(dialect: Dialect) -> _Statements:
    key = (dialect.name, dialect.driver)
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = _Statements(dialect)
    return found


class CapacityStore:
    """The scopes' permits, on the store's engine (`Store.capacity`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._prepared = _statements(engine.dialect)

    def _insert(self, table: Table) -> Insert:
        if self._engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    # admission ------------------------------------------------------------------------------

    def admit(self, claim: CapacityClaim, now: datetime) -> Admission:
        """Grant ``claim`` a permit in every scope, or none (see the module's docstring)."""
        with self._engine.begin() as conn:
            views = [self._view(conn, limit, now) for limit in in_lock_order(claim.limits)]
            counted = [view for view in views if view.limit.limited]
            refusals = [refusal(view, claim, now) for view in views]
            refused = [refusal for refusal in refusals if refusal is not None]
            if not refused:
                for view in counted:
                    self._hold(conn, view.limit.scope, claim, now)
                return Admission(granted=True, counts=counts(views, claim, HELD))
            for view in counted:
                self._wait(conn, view.limit.scope, claim, now, longest(refused).retry_in)
            first = longest(refused)
            return Admission(
                granted=False,
                retry_in=first.retry_in,
                scope=first.scope,
                reason=first.reason,
                counts=counts(views, claim, WAITING),
            )

    def renew(self, holder: str, scopes: Iterable[str], now: datetime) -> None:
        """Extend the lease of ``holder``'s permits (its call still runs)."""
        with self._engine.begin() as conn:
            conn.execute(
                update(capacity_holders)
                .where(
                    capacity_holders.c.scope.in_(list(scopes)),
                    capacity_holders.c.holder == holder,
                    capacity_holders.c.state == HELD,
                )
                .values(expires_at=now + PERMIT_LEASE)
            )

    def release(
        self, claim: CapacityClaim, now: datetime, *, tokens: int | None = None
    ) -> tuple[Woken, ...]:
        """Give ``claim``'s permits back (a windowed scope keeps the call, with the tokens it
        used, for its minute); the waiters who may now take a permit."""
        wake: set[Woken] = set()
        with self._engine.begin() as conn:
            for limit in in_lock_order(claim.limits):
                if not limit.limited:
                    continue  # nothing was counted there
                view = self._locked(conn, limit, now, excluding=claim.holder)
                self._give_back(conn, limit, claim.holder, now, tokens)
                view.rows = [row for row in view.rows if row.holder != claim.holder]
                owed = free_permits(view, now) - len(view.woken())
                chosen = next_in_line(view, now, view.waiting(), owed)
                self._wake(conn, limit.scope, chosen, now)
                wake.update(Woken(row.holder, row.workflow_id) for row in chosen)
        return tuple(sorted(woken for woken in wake if woken.workflow_id != claim.workflow_id))

    def is_woken(self, claim: CapacityClaim) -> bool:
        """Whether a release woke ``claim``'s call (a call waiting in its activity looks, for
        a release on another worker)."""
        with self._engine.connect() as conn:
            found = conn.execute(
                select(capacity_holders.c.holder)
                .where(
                    capacity_holders.c.scope.in_([limit.scope for limit in claim.limits]),
                    capacity_holders.c.holder == claim.holder,
                    capacity_holders.c.state == WOKEN,
                )
                .limit(1)
            ).first()
        return found is not None

    def forget_waiter(self, claim: CapacityClaim) -> None:
        """Drop ``claim``'s waiting places (its call was cancelled while it waited)."""
        with self._engine.begin() as conn:
            conn.execute(
                delete(capacity_holders).where(
                    capacity_holders.c.scope.in_([limit.scope for limit in claim.limits]),
                    capacity_holders.c.holder == claim.holder,
                    capacity_holders.c.state.in_([WAITING, WOKEN]),
                )
            )

    def _wake(self, conn: Connection, scope: str, rows: Sequence[Row], now: datetime) -> None:
        if not rows:
            return
        conn.execute(
            update(capacity_holders)
            .where(
                capacity_holders.c.scope == scope,
                capacity_holders.c.holder.in_([row.holder for row in rows]),
            )
            .values(state=WOKEN, expires_at=now + WAKE_GRACE)
        )

    def pause(self, scope: str, until: datetime) -> None:
        """No call of ``scope`` starts before ``until`` (a provider asked the fleet to slow
        down: a 429's Retry-After); a later pause extends it, an earlier one is ignored."""
        with self._engine.begin() as conn:
            self._ensure_scope(conn, scope)
            conn.execute(
                update(capacity_scopes)
                .where(
                    capacity_scopes.c.scope == scope,
                    or_(
                        capacity_scopes.c.paused_until.is_(None),
                        capacity_scopes.c.paused_until < until,
                    ),
                )
                .values(paused_until=until)
            )

    def forget_workflow(self, workflow_id: str) -> None:
        """Drop the waiting places of ``workflow_id``'s calls (it ended: none comes back)."""
        with self._engine.begin() as conn:
            conn.execute(
                delete(capacity_holders).where(
                    capacity_holders.c.workflow_id == workflow_id,
                    capacity_holders.c.state.in_([WAITING, WOKEN]),
                )
            )

    def in_flight(self, scope: str, now: datetime) -> tuple[int, int]:
        """(calls holding a permit, calls waiting) of ``scope`` now (for metrics and tests)."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(capacity_holders.c.state).where(
                    capacity_holders.c.scope == scope, capacity_holders.c.expires_at > now
                )
            ).all()
        counted = Counter(row.state for row in rows)
        return counted[HELD], counted[WAITING] + counted[WOKEN]

    # rows -----------------------------------------------------------------------------------

    def _ensure_scope(self, conn: Connection, scope: str) -> None:
        conn.execute(
            self._insert(capacity_scopes)
            .values(scope=scope, decisions=0)
            .on_conflict_do_nothing(index_elements=["scope"])
        )

    def _view(self, conn: Connection, limit: ScopeLimit, now: datetime) -> ScopeView:
        """The scope as an admission needs it: locked and read when a limit applies, else
        only its pause, read without a lock (one statement instead of four: a profile without
        limits of its own is most calls' second scope)."""
        if limit.limited:
            return self._locked(conn, limit, now)
        paused_until = self._prepared.pause.rows(conn, {"scope": limit.scope})
        return ScopeView(limit, _aware(_datetime(paused_until[0][0])) if paused_until else None)

    def _locked(
        self, conn: Connection, limit: ScopeLimit, now: datetime, *, excluding: str | None = None
    ) -> ScopeView:
        """Lock the scope's row (its decisions are serialised), drop what expired, read it.

        Two statements in the usual case (a call costs two of these per scope, its admission
        and its release, so each statement here is paid four times a model call): the scope's
        row is created, locked and its pause read by one upsert with RETURNING (on
        PostgreSQL the upsert locks the row as an UPDATE would; on SQLite any write takes the
        write lock); its rows are read, and the DELETE of expired ones is sent only when the
        rows read under that lock show one (they cannot change before the commit). A windowed
        scope's spent calls are counted by a third statement, not read (`ScopeView.spent`);
        ``excluding``: a holder left out of that count (`release`: the call giving back, as
        its row is left out of the view)."""
        prepared = self._prepared
        paused_until = prepared.lock.rows(conn, {"scope": limit.scope})[0][0]
        rows = (prepared.live_rows if limit.windowed else prepared.rows).rows(
            conn, {"scope": limit.scope}
        )
        live: list[Row] = []
        expired = False
        # (RETURNING's values are not converted by `Prepared`: SQLite's come back as text.)
        view = ScopeView(limit, _aware(_datetime(paused_until)))
        if limit.windowed:
            expired = self._count_spent(conn, view, now, excluding)
        for holder, partition_key, workflow_id, state, since_at, expires_at, tokens in rows:
            since = _aware(since_at) or now
            if is_expired(state, since, _aware(expires_at) or now, now):
                expired = True
                continue
            live.append(Row(holder, partition_key, workflow_id, state, since, tokens or 0))
        if expired:
            prepared.expired.rows(conn, {"scope": limit.scope, "now": now, "cut": now - WINDOW})
        view.rows = live
        return view

    def _count_spent(
        self, conn: Connection, view: ScopeView, now: datetime, excluding: str | None
    ) -> bool:
        """Fill ``view``'s count of spent calls in the window; whether one has left it."""
        values = {"scope": view.limit.scope, "cut": now - WINDOW, "excluding": excluding}
        counting = self._prepared.spent if excluding is None else self._prepared.spent_but
        found = counting.rows(conn, values)[0]
        view.spent, view.spent_tokens = int(found[0]), int(found[1] or 0)
        view.spent_oldest = _aware(_datetime(found[2]))
        return int(found[3]) > 0

    def _hold(self, conn: Connection, scope: str, claim: CapacityClaim, now: datetime) -> None:
        values = {
            "scope": scope,
            "holder": claim.holder,
            "partition_key": claim.partition_key,
            "workflow_id": claim.workflow_id,
            "state": HELD,
            "since": now,
            "expires_at": now + PERMIT_LEASE,
            "tokens": claim.tokens,
        }
        self._prepared.hold.rows(conn, values)
        served = {
            **values,
            "holder": f"~{claim.partition_key}",
            "workflow_id": "",
            "state": SERVED,
            "expires_at": now + SERVED_MEMORY,
            "tokens": None,
        }
        self._prepared.serve.rows(conn, served)

    def _wait(
        self,
        conn: Connection,
        scope: str,
        claim: CapacityClaim,
        now: datetime,
        retry_in: timedelta,
    ) -> None:
        """Take (or keep, with its first time) the claim's place in the scope's queue."""
        expires = now + retry_in + WAITER_GRACE
        values = {
            "scope": scope,
            "holder": claim.holder,
            "partition_key": claim.partition_key,
            "workflow_id": claim.workflow_id,
            "state": WAITING,
            "since": now,
            "expires_at": expires,
            "tokens": claim.tokens,
        }
        statement = self._insert(capacity_holders).values(values)
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=["scope", "holder"],
                set_={"state": WAITING, "expires_at": expires, "tokens": claim.tokens},
                where=capacity_holders.c.state.in_([WAITING, WOKEN]),
            )
        )

    def _give_back(
        self,
        conn: Connection,
        limit: ScopeLimit,
        holder: str,
        now: datetime,
        tokens: int | None,
    ) -> None:
        prepared = self._prepared
        mine = {"scope": limit.scope, "holder_": holder}
        if not limit.windowed:
            prepared.forget.rows(conn, mine)
        elif tokens is None:
            prepared.spend.rows(conn, {**mine, "until": now + WINDOW})
        else:
            prepared.spend_tokens.rows(conn, {**mine, "until": now + WINDOW, "used": tokens})


# decisions (pure: what the rows read under the lock allow) -----------------------------------


def _datetime(value: Any) -> datetime | None:
    """A datetime read back from SQLite as the text it stores (an aggregate's, RETURNING's)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _aware(moment: datetime | None) -> datetime | None:
    """SQLite gives naive datetimes back: they were written in UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


__all__ = [
    "PERMIT_LEASE",
    "WAKE_FALLBACK",
    "WAKE_GRACE",
    "WINDOW",
    "Admission",
    "CapacityClaim",
    "CapacityStore",
    "ScopeLimit",
    "Woken",
]
