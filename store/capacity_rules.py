"""What the fleet's capacity allows (`otherone.store.capacity`): the scopes' limits, a call's
claim, and the decisions made over a scope's rows as read under its lock. Pure, no database:
`CapacityStore` reads the rows, calls these, and writes what they decide."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

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
    def limited(self) -> bool:
        """Whether any limit applies: a scope without one only ever refuses for a pause (a
        provider's 429), so its calls are not counted at all."""
        return self.concurrent is not None or self.windowed

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
    wait."""

    granted: bool
    retry_in: timedelta = timedelta(0)
    scope: str | None = None
    reason: str | None = None
    #: (scope, calls holding a permit, calls waiting) as the decision left each scope.
    counts: tuple[tuple[str, int, int], ...] = ()


class Woken(NamedTuple):
    """A waiter a release woke: its call (``holder``) and the workflow that made it."""

    holder: str
    workflow_id: str


@dataclass
class Row:
    holder: str
    partition_key: str
    workflow_id: str
    state: str
    since: datetime
    tokens: int


@dataclass
class ScopeView:
    """A scope's live rows, read under its lock."""

    limit: ScopeLimit
    paused_until: datetime | None
    rows: list[Row] = field(default_factory=list)
    #: A windowed scope's spent calls still in the window, counted by the database rather
    #: than read (a minute of them is hundreds of rows on a busy fleet, and reading them made
    #: every admission and release cost in proportion): how many, their tokens, the oldest.
    spent: int = 0
    spent_tokens: int = 0
    spent_oldest: datetime | None = None

    def held(self) -> list[Row]:
        return [row for row in self.rows if row.state == HELD]

    def waiting(self) -> list[Row]:
        return [row for row in self.rows if row.state == WAITING]

    def woken(self) -> list[Row]:
        return [row for row in self.rows if row.state == WOKEN]

    def in_window(self, now: datetime) -> list[Row]:
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


def counts(
    views: Sequence[ScopeView], claim: CapacityClaim, state: str
) -> tuple[tuple[str, int, int], ...]:
    """Each scope's (held, waiting) once ``claim`` is in ``state`` there."""
    counted = []
    for view in views:
        if not view.limit.limited:
            continue  # its calls are not counted
        others = [row for row in view.rows if row.holder != claim.holder]
        held = sum(1 for row in others if row.state == HELD) + (state == HELD)
        waiting = sum(1 for row in others if row.state in (WAITING, WOKEN)) + (state == WAITING)
        counted.append((view.limit.scope, held, waiting))
    return tuple(counted)


def in_lock_order(limits: Sequence[ScopeLimit]) -> list[ScopeLimit]:
    return sorted(limits, key=lambda limit: limit.scope)


def longest(refusals: Sequence[Admission]) -> Admission:
    return max(refusals, key=lambda refusal: refusal.retry_in)


def is_expired(state: str, since: datetime, expires_at: datetime, now: datetime) -> bool:
    """Whether a holder's row is gone at ``now``: the DELETE of `CapacityStore._locked`, in
    Python (a spent call leaves the window, any other row when its lease or place runs out)."""
    if state == SPENT:
        return since <= now - WINDOW
    return expires_at <= now


def refusal(view: ScopeView, claim: CapacityClaim, now: datetime) -> Admission | None:
    """None if ``view``'s scope grants ``claim`` a permit now, else why not."""
    limit = view.limit
    if any(row.holder == claim.holder and row.state == HELD for row in view.rows):
        return None  # a retry of the call: its permit is still its own
    if view.paused_until is not None and view.paused_until > now:
        return refused(limit, "paused", view.paused_until - now)
    if (
        limit.requests_per_minute is not None
        and view.window_count(now) >= limit.requests_per_minute
    ):
        return refused(limit, "requests_per_minute", window_frees(view, now))
    if limit.tokens_per_minute is not None:
        used = view.window_tokens(now)
        # A call bigger than the whole budget still runs, alone in its minute.
        if used and used + claim.tokens > limit.tokens_per_minute:
            return refused(limit, "tokens_per_minute", window_frees(view, now))
    free = free_permits(view, now)
    if free <= 0:
        return refused(limit, "max_concurrent", WAKE_FALLBACK)
    # The free permits go to the waiters woken for them (who are on their way) and to this
    # call, in fair order; waiters still asleep wait for the next release.
    candidates = view.woken()
    if not any(row.holder == claim.holder for row in candidates):
        mine = next((row.since for row in view.rows if row.holder == claim.holder), now)
        candidates.append(
            Row(claim.holder, claim.partition_key, claim.workflow_id, WAITING, mine, 0)
        )
    line = next_in_line(view, now, candidates, free)
    if any(row.holder == claim.holder for row in line):
        return None
    return refused(limit, "queued", WAKE_FALLBACK)


def refused(limit: ScopeLimit, reason: str, retry_in: timedelta) -> Admission:
    return Admission(
        granted=False,
        retry_in=max(retry_in, timedelta(milliseconds=50)),
        scope=limit.scope,
        reason=reason,
    )


def window_frees(view: ScopeView, now: datetime) -> timedelta:
    """When the oldest call of the window leaves it."""
    return view.window_oldest(now) + WINDOW - now


def free_permits(view: ScopeView, now: datetime) -> int:
    """Permits a call may take now: the concurrency left, and the requests left this minute."""
    limit = view.limit
    free: list[int] = []
    if limit.concurrent is not None:
        free.append(limit.concurrent - len(view.held()))
    if limit.requests_per_minute is not None:
        free.append(limit.requests_per_minute - view.window_count(now))
    return min(free) if free else 1 << 30


def next_in_line(
    view: ScopeView, now: datetime, candidates: Sequence[Row], permits: int
) -> list[Row]:
    """Which of ``candidates`` the next ``permits`` permits go to, in fair order: each to the
    partition with the fewest calls in flight, then the one served longest ago (a round
    robin), and within a partition first come, first served."""
    in_flight = Counter(row.partition_key for row in view.held())
    served = view.served()
    never = datetime.min.replace(tzinfo=UTC)
    line: list[Row] = []
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
