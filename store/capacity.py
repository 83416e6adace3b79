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
from dataclasses import dataclass, field
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

from otherone.store.prepared import Prepared
from otherone.store.schema import capacity_holders, capacity_scopes

Insert = postgresql.Insert | sqlite.Insert

#: Rate limits count the calls (and tokens) admitted in the last minute, plus a second: a call
#: reaches the provider a little after its admission (and workers' clocks differ a little), so
#: a window of exactly 60 s let a provider see a fourth call of three a minute 59.99 s after
#: the first.
WINDOW = timedelta(seconds=61)
#: A held permit's lease: renewed every third of it while the call runs (`renew`).
PERMIT_LEASE = timedelta(seconds=30)
#: A waiter refused for want of a free permit comes back after this at the latest, should the
#: release that frees one fail to wake it (its worker killed between the two).
WAKE_FALLBACK = timedelta(seconds=30)
#: How long past its expected return a waiter keeps its place in the queue.
WAITER_GRACE = timedelta(seconds=15)

HELD, WAITING, WOKEN, SPENT, SERVED = "held", "waiting", "woken", "spent", "served"
#: A waiter woken for a free permit keeps it reserved this long; one that does not come back
#: in time (its worker overloaded or gone) loses its place, so the permit does not sit idle.
WAKE_GRACE = timedelta(seconds=15)
#: How long a partition's last grant is remembered for the round robin.
SERVED_MEMORY = timedelta(minutes=10)


@dataclass(frozen=True)
class ScopeLimit:
    """One scope a call needs, with its limits (None: that limit does not apply)."""

    scope: str
    concurrent: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def windowed(self) -> bool:
        """Whether finished calls count for a minute (a per-minute limit applies)."""
        return self.requests_per_minute is not None or self.tokens_per_minute is not None


@dataclass(frozen=True)
class CapacityClaim:
    """A call asking for permits: who asks (``holder``: stable across the call's retries, so
    a retry takes back its own permit), for which partition and workflow (woken by a release),
    in which scopes, with how many tokens it may use (counted against tokens per minute)."""

    holder: str
    partition_key: str
    workflow_id: str
    limits: tuple[ScopeLimit, ...]
    tokens: int = 0


@dataclass(frozen=True)
class Admission:
    """What `admit` decided: granted, or refused with the scope, the reason and how long to
    wait; ``wake``: workflows of better ranked waiters to wake (a permit is free for them)."""

    granted: bool
    retry_in: timedelta = timedelta(0)
    scope: str | None = None
    reason: str | None = None
    wake: tuple[str, ...] = ()
    #: (scope, calls holding a permit, calls waiting) as the decision left each scope.
    counts: tuple[tuple[str, int, int], ...] = ()


@dataclass
class _Row:
    holder: str
    partition_key: str
    workflow_id: str
    state: str
    since: datetime
    tokens: int


@dataclass
class _ScopeView:
    """A scope's live rows, read under its lock."""

    limit: ScopeLimit
    paused_until: datetime | None
    rows: list[_Row] = field(default_factory=list)
    #: A windowed scope's spent calls still in the window, counted by the database rather
    #: than read (a minute of them is hundreds of rows on a busy fleet, and reading them made
    #: every admission and release cost in proportion): how many, their tokens, the oldest.
    spent: int = 0
    spent_tokens: int = 0
    spent_oldest: datetime | None = None

    def held(self) -> list[_Row]:
        return [row for row in self.rows if row.state == HELD]

    def waiting(self) -> list[_Row]:
        return [row for row in self.rows if row.state == WAITING]

    def woken(self) -> list[_Row]:
        return [row for row in self.rows if row.state == WOKEN]

    def in_window(self, now: datetime) -> list[_Row]:
        """The calls of the window read as rows (held, and spent ones of a scope read whole);
        `window_count`, `window_tokens` and `window_oldest` add the counted ones."""
        return [row for row in self.rows if row.state in (HELD, SPENT) and row.since > now - WINDOW]

    def served(self) -> dict[str, datetime]:
        """When each partition was last granted a permit (those remembered)."""
        return {row.partition_key: row.since for row in self.rows if row.state == SERVED}

    def window_count(self, now: datetime) -> int:
        return len(self.in_window(now)) + self.spent

    def window_tokens(self, now: datetime) -> int:
        return sum(row.tokens for row in self.in_window(now)) + self.spent_tokens

    def window_oldest(self, now: datetime) -> datetime:
        """When the oldest call of the window was admitted (the window holds one)."""
        found = [row.since for row in self.in_window(now)]
        if self.spent_oldest is not None:
            found.append(self.spent_oldest)
        return min(found)


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
            views = [self._locked(conn, limit, now) for limit in _in_lock_order(claim.limits)]
            refusals = [_refusal(view, claim, now) for view in views]
            refused = [refusal for refusal in refusals if refusal is not None]
            if not refused:
                for view in views:
                    self._hold(conn, view.limit.scope, claim, now)
                return Admission(granted=True, counts=_counts(views, claim, HELD))
            for view in views:
                self._wait(conn, view.limit.scope, claim, now, _longest(refused).retry_in)
            wake = {workflow for refusal in refused for workflow in refusal.wake}
            wake.discard(claim.workflow_id)
            first = _longest(refused)
            return Admission(
                granted=False,
                retry_in=first.retry_in,
                scope=first.scope,
                reason=first.reason,
                wake=tuple(sorted(wake)),
                counts=_counts(views, claim, WAITING),
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
    ) -> tuple[str, ...]:
        """Give ``claim``'s permits back (a windowed scope keeps the call, with the tokens it
        used, for its minute); the workflows of the waiters who may now take a permit."""
        wake: set[str] = set()
        with self._engine.begin() as conn:
            for limit in _in_lock_order(claim.limits):
                view = self._locked(conn, limit, now, excluding=claim.holder)
                self._give_back(conn, limit, claim.holder, now, tokens)
                view.rows = [row for row in view.rows if row.holder != claim.holder]
                owed = _free_permits(view, now) - len(view.woken())
                chosen = _next_in_line(view, now, view.waiting(), owed)
                self._wake(conn, limit.scope, chosen, now)
                wake.update(row.workflow_id for row in chosen)
        wake.discard(claim.workflow_id)
        return tuple(sorted(wake))

    def _wake(self, conn: Connection, scope: str, rows: Sequence[_Row], now: datetime) -> None:
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

    def _locked(
        self, conn: Connection, limit: ScopeLimit, now: datetime, *, excluding: str | None = None
    ) -> _ScopeView:
        """Lock the scope's row (its decisions are serialised), drop what expired, read it.

        Two statements in the usual case (a call costs two of these per scope, its admission
        and its release, so each statement here is paid four times a model call): the scope's
        row is created, locked and its pause read by one upsert with RETURNING (on
        PostgreSQL the upsert locks the row as an UPDATE would; on SQLite any write takes the
        write lock); its rows are read, and the DELETE of expired ones is sent only when the
        rows read under that lock show one (they cannot change before the commit). A windowed
        scope's spent calls are counted by a third statement, not read (`_ScopeView.spent`);
        ``excluding``: a holder left out of that count (`release`: the call giving back, as
        its row is left out of the view)."""
        prepared = self._prepared
        paused_until = prepared.lock.rows(conn, {"scope": limit.scope})[0][0]
        rows = (prepared.live_rows if limit.windowed else prepared.rows).rows(
            conn, {"scope": limit.scope}
        )
        live: list[_Row] = []
        expired = False
        # (RETURNING's values are not converted by `Prepared`: SQLite's come back as text.)
        view = _ScopeView(limit, _aware(_datetime(paused_until)))
        if limit.windowed:
            expired = self._count_spent(conn, view, now, excluding)
        for holder, partition_key, workflow_id, state, since_at, expires_at, tokens in rows:
            since = _aware(since_at) or now
            if _expired(state, since, _aware(expires_at) or now, now):
                expired = True
                continue
            live.append(_Row(holder, partition_key, workflow_id, state, since, tokens or 0))
        if expired:
            prepared.expired.rows(conn, {"scope": limit.scope, "now": now, "cut": now - WINDOW})
        view.rows = live
        return view

    def _count_spent(
        self, conn: Connection, view: _ScopeView, now: datetime, excluding: str | None
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


def _counts(
    views: Sequence[_ScopeView], claim: CapacityClaim, state: str
) -> tuple[tuple[str, int, int], ...]:
    """Each scope's (held, waiting) once ``claim`` is in ``state`` there."""
    counted = []
    for view in views:
        others = [row for row in view.rows if row.holder != claim.holder]
        held = sum(1 for row in others if row.state == HELD) + (state == HELD)
        waiting = sum(1 for row in others if row.state in (WAITING, WOKEN)) + (state == WAITING)
        counted.append((view.limit.scope, held, waiting))
    return tuple(counted)


def _in_lock_order(limits: Sequence[ScopeLimit]) -> list[ScopeLimit]:
    return sorted(limits, key=lambda limit: limit.scope)


def _longest(refusals: Sequence[Admission]) -> Admission:
    return max(refusals, key=lambda refusal: refusal.retry_in)


def _expired(state: str, since: datetime, expires_at: datetime, now: datetime) -> bool:
    """Whether a holder's row is gone at ``now``: the DELETE of `CapacityStore._locked`, in
    Python (a spent call leaves the window, any other row when its lease or place runs out)."""
    if state == SPENT:
        return since <= now - WINDOW
    return expires_at <= now


def _refusal(view: _ScopeView, claim: CapacityClaim, now: datetime) -> Admission | None:
    """None if ``view``'s scope grants ``claim`` a permit now, else why not."""
    limit = view.limit
    if any(row.holder == claim.holder and row.state == HELD for row in view.rows):
        return None  # a retry of the call: its permit is still its own
    if view.paused_until is not None and view.paused_until > now:
        return _refused(limit, "paused", view.paused_until - now)
    if (
        limit.requests_per_minute is not None
        and view.window_count(now) >= limit.requests_per_minute
    ):
        return _refused(limit, "requests_per_minute", _window_frees(view, now))
    if limit.tokens_per_minute is not None:
        used = view.window_tokens(now)
        # A call bigger than the whole budget still runs, alone in its minute.
        if used and used + claim.tokens > limit.tokens_per_minute:
            return _refused(limit, "tokens_per_minute", _window_frees(view, now))
    free = _free_permits(view, now)
    if free <= 0:
        return _refused(limit, "max_concurrent", WAKE_FALLBACK)
    # The free permits go to the waiters woken for them (who are on their way) and to this
    # call, in fair order; waiters still asleep wait for the next release.
    candidates = view.woken()
    if not any(row.holder == claim.holder for row in candidates):
        mine = next((row.since for row in view.rows if row.holder == claim.holder), now)
        candidates.append(
            _Row(claim.holder, claim.partition_key, claim.workflow_id, WAITING, mine, 0)
        )
    line = _next_in_line(view, now, candidates, free)
    if any(row.holder == claim.holder for row in line):
        return None
    return _refused(limit, "queued", WAKE_FALLBACK)


def _refused(
    limit: ScopeLimit, reason: str, retry_in: timedelta, *, wake: tuple[str, ...] = ()
) -> Admission:
    return Admission(
        granted=False,
        retry_in=max(retry_in, timedelta(milliseconds=50)),
        scope=limit.scope,
        reason=reason,
        wake=wake,
    )


def _window_frees(view: _ScopeView, now: datetime) -> timedelta:
    """When the oldest call of the window leaves it."""
    return view.window_oldest(now) + WINDOW - now


def _free_permits(view: _ScopeView, now: datetime) -> int:
    """Permits a call may take now: the concurrency left, and the requests left this minute."""
    limit = view.limit
    free: list[int] = []
    if limit.concurrent is not None:
        free.append(limit.concurrent - len(view.held()))
    if limit.requests_per_minute is not None:
        free.append(limit.requests_per_minute - view.window_count(now))
    return min(free) if free else 1 << 30


def _next_in_line(
    view: _ScopeView, now: datetime, candidates: Sequence[_Row], permits: int
) -> list[_Row]:
    """Which of ``candidates`` the next ``permits`` permits go to, in fair order: each to the
    partition with the fewest calls in flight, then the one served longest ago (a round
    robin), and within a partition first come, first served."""
    in_flight = Counter(row.partition_key for row in view.held())
    served = view.served()
    never = datetime.min.replace(tzinfo=UTC)
    line: list[_Row] = []
    remaining = sorted(candidates, key=lambda row: (row.since, row.holder))
    while remaining and len(line) < permits:
        chosen = min(
            remaining,
            key=lambda row: (
                in_flight[row.partition_key],
                served.get(row.partition_key, never),
                row.since,
            ),
        )
        remaining.remove(chosen)
        in_flight[chosen.partition_key] += 1
        served[chosen.partition_key] = now
        line.append(chosen)
    return line


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
    "WINDOW",
    "Admission",
    "CapacityClaim",
    "CapacityStore",
    "ScopeLimit",
]
