"""Fleet permits in the store (`otherone.store.capacity`), on SQLite and PostgreSQL: what one
transaction decides, given the rows other workers left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from otherone.store import Store
from otherone.store.capacity import (
    PERMIT_LEASE,
    WAKE_GRACE,
    WINDOW,
    CapacityClaim,
    ScopeLimit,
    Woken,
)

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
TWO = ScopeLimit("model@q", concurrent=2)


def woken(release: tuple[Woken, ...]) -> list[str]:
    """The workflows of the waiters a release woke (each holder is their call's)."""
    assert all(holder == f"{workflow_id}:t1" for holder, workflow_id in release)
    return [workflow_id for _, workflow_id in release]


def claim(n: int, partition: str = "p", *limits: ScopeLimit, tokens: int = 0) -> CapacityClaim:
    return CapacityClaim(
        holder=f"run-{partition}-{n}:t1",
        partition_key=partition,
        workflow_id=f"run-{partition}-{n}",
        limits=limits or (TWO,),
        tokens=tokens,
    )


def test_concurrency_is_a_fleet_wide_count_and_a_release_wakes_the_next(store: Store) -> None:
    capacity = store.capacity
    assert capacity.admit(claim(1), NOW).granted
    assert capacity.admit(claim(2), NOW).granted
    third = capacity.admit(claim(3), NOW)
    assert not third.granted
    assert (third.scope, third.reason) == ("model@q", "max_concurrent")
    assert capacity.in_flight("model@q", NOW) == (2, 1)
    # A retry of a call that holds its permit takes it back, counting nothing twice.
    assert capacity.admit(claim(1), NOW).granted
    assert woken(capacity.release(claim(1), NOW)) == ["run-p-3"]
    assert capacity.admit(claim(3), NOW).granted
    assert capacity.in_flight("model@q", NOW) == (2, 0)


def test_a_permit_of_a_lost_worker_comes_back_when_its_lease_runs_out(store: Store) -> None:
    capacity = store.capacity
    assert capacity.admit(claim(1), NOW).granted
    assert capacity.admit(claim(2), NOW).granted
    later = NOW + PERMIT_LEASE / 2
    capacity.renew(claim(2).holder, ["model@q"], later)  # still running: renewed
    assert not capacity.admit(claim(3), later).granted
    expired = NOW + PERMIT_LEASE + timedelta(seconds=1)  # claim 1's worker died
    assert capacity.admit(claim(3), expired).granted
    assert not capacity.admit(claim(4), expired).granted  # claim 2 still holds its own


def test_partitions_share_a_short_scope_fairly(store: Store) -> None:
    """Tenant a fills the queue first; when permits free up, tenant b's single call is next."""
    capacity = store.capacity
    assert capacity.admit(claim(1, "a"), NOW).granted
    assert capacity.admit(claim(2, "a"), NOW).granted
    for n in range(3, 20):
        assert not capacity.admit(claim(n, "a"), NOW + timedelta(milliseconds=n)).granted
    assert not capacity.admit(claim(1, "b"), NOW + timedelta(seconds=1)).granted
    wake = capacity.release(claim(1, "a"), NOW + timedelta(seconds=2))
    assert woken(wake) == ["run-b-1"]  # fewest in flight first, though it came last
    # a's next in line comes back first, and is refused: the permit is b's.
    refused = capacity.admit(claim(3, "a"), NOW + timedelta(seconds=2))
    assert (refused.granted, refused.reason) == (False, "queued")
    assert capacity.admit(claim(1, "b"), NOW + timedelta(seconds=3)).granted


def test_requests_per_minute_hold_over_a_sliding_window(store: Store) -> None:
    capacity = store.capacity
    three = ScopeLimit("profile:gpt", requests_per_minute=3)
    for n in range(3):
        at = NOW + timedelta(seconds=n)
        assert capacity.admit(claim(n, "p", three), at).granted
        capacity.release(claim(n, "p", three), at + timedelta(milliseconds=100))
    refused = capacity.admit(claim(9, "p", three), NOW + timedelta(seconds=10))
    assert (refused.granted, refused.reason) == (False, "requests_per_minute")
    assert refused.retry_in == NOW + WINDOW - (NOW + timedelta(seconds=10))
    assert capacity.admit(claim(9, "p", three), NOW + WINDOW + timedelta(milliseconds=1)).granted


def test_tokens_per_minute_count_what_calls_used(store: Store) -> None:
    capacity = store.capacity
    budget = ScopeLimit("profile:gpt", tokens_per_minute=1000)
    assert capacity.admit(claim(1, "p", budget, tokens=5000), NOW).granted  # alone: runs
    capacity.release(claim(1, "p", budget), NOW, tokens=900)  # it used 900
    assert not capacity.admit(claim(2, "p", budget, tokens=200), NOW).granted
    assert capacity.admit(claim(3, "p", budget, tokens=100), NOW).granted


def test_a_pause_holds_every_call_of_the_scope_until_it_ends(store: Store) -> None:
    capacity = store.capacity
    scope = ScopeLimit("profile:gpt", concurrent=10)
    capacity.pause("profile:gpt", NOW + timedelta(seconds=20))
    capacity.pause("profile:gpt", NOW + timedelta(seconds=5))  # shorter: ignored
    refused = capacity.admit(claim(1, "p", scope), NOW)
    assert (refused.reason, refused.retry_in) == ("paused", timedelta(seconds=20))
    assert capacity.admit(claim(1, "p", scope), NOW + timedelta(seconds=20)).granted


def test_a_call_needs_every_scope_or_holds_none(store: Store) -> None:
    capacity = store.capacity
    one = ScopeLimit("profile:gpt", concurrent=1)
    assert capacity.admit(claim(1, "p", TWO, one), NOW).granted
    refused = capacity.admit(claim(2, "p", TWO, one), NOW)
    assert (refused.granted, refused.scope) == (False, "profile:gpt")
    assert capacity.in_flight("model@q", NOW) == (1, 1)  # nothing held in the scope it got


def test_with_one_permit_partitions_take_turns(store: Store) -> None:
    """Nobody else in flight after a release: the partition served longest ago goes next."""
    capacity = store.capacity
    one = ScopeLimit("model@q", concurrent=1)
    assert capacity.admit(claim(1, "a", one), NOW).granted
    for n in range(2, 6):
        assert not capacity.admit(claim(n, "a", one), NOW + timedelta(milliseconds=n)).granted
    assert not capacity.admit(claim(1, "b", one), NOW + timedelta(seconds=1)).granted
    assert woken(capacity.release(claim(1, "a", one), NOW + timedelta(seconds=2))) == ["run-b-1"]
    assert capacity.admit(claim(1, "b", one), NOW + timedelta(seconds=2)).granted
    # b was served last: a's oldest waiter is next.
    assert woken(capacity.release(claim(1, "b", one), NOW + timedelta(seconds=3))) == ["run-a-2"]


def test_a_woken_waiter_keeps_the_permit_for_a_while_then_loses_it(store: Store) -> None:
    capacity = store.capacity
    one = ScopeLimit("model@q", concurrent=1)
    assert capacity.admit(claim(1, "p", one), NOW).granted
    assert not capacity.admit(claim(2, "p", one), NOW).granted
    assert woken(capacity.release(claim(1, "p", one), NOW)) == ["run-p-2"]
    # A call arriving while run 2 is on its way queues behind it ...
    early = capacity.admit(claim(3, "p", one), NOW + WAKE_GRACE / 2)
    assert (early.granted, early.reason) == (False, "queued")
    # ... but run 2 never came back (its worker overloaded): the permit does not idle.
    assert capacity.admit(claim(3, "p", one), NOW + WAKE_GRACE * 2).granted


def test_a_free_permit_goes_to_the_caller_there_while_waiters_sleep(store: Store) -> None:
    """Permits freed without a release (a lost worker's lease ran out) wake nobody: the first
    caller takes one rather than letting it idle until the sleepers come back."""
    capacity = store.capacity
    one = ScopeLimit("model@q", concurrent=1)
    assert capacity.admit(claim(1, "p", one), NOW).granted
    assert not capacity.admit(claim(2, "p", one), NOW).granted
    later = NOW + PERMIT_LEASE + timedelta(seconds=1)
    assert capacity.admit(claim(3, "p", one), later).granted


def test_a_waiter_can_see_it_was_woken_and_a_cancelled_one_leaves_the_line(store: Store) -> None:
    """A call waiting in its activity on another worker than the release's looks (`is_woken`);
    a call cancelled while it waits gives up its place (`forget_waiter`), so the next release
    wakes the one after it."""
    capacity = store.capacity
    one = ScopeLimit("model@q", concurrent=1)
    assert capacity.admit(claim(1, "p", one), NOW).granted
    assert not capacity.admit(claim(2, "p", one), NOW + timedelta(seconds=1)).granted
    assert not capacity.admit(claim(3, "p", one), NOW + timedelta(seconds=2)).granted
    assert not capacity.is_woken(claim(2, "p", one))
    capacity.forget_waiter(claim(2, "p", one))
    assert woken(capacity.release(claim(1, "p", one), NOW + timedelta(seconds=3))) == ["run-p-3"]
    assert capacity.is_woken(claim(3, "p", one))
    assert not capacity.is_woken(claim(2, "p", one))


def test_a_scope_without_limits_counts_nothing_but_its_pause_holds(store: Store) -> None:
    """A model profile without limits of its own is most calls' second scope: it takes no
    permit and leaves no row (an admission reads only its pause), yet a provider's pause of
    it refuses every call until it ends."""
    capacity = store.capacity
    free = ScopeLimit("profile:plain")
    for n in range(1, 4):
        assert capacity.admit(claim(n, "p", free), NOW).granted
    assert capacity.in_flight("profile:plain", NOW) == (0, 0)
    capacity.release(claim(1, "p", free), NOW)
    capacity.pause("profile:plain", NOW + timedelta(seconds=5))
    refused = capacity.admit(claim(4, "p", TWO, free), NOW + timedelta(seconds=1))
    assert (refused.granted, refused.scope, refused.reason) == (False, "profile:plain", "paused")
    assert refused.retry_in == timedelta(seconds=4)
    assert capacity.in_flight("model@q", NOW + timedelta(seconds=1)) == (0, 1)  # queued there
    assert capacity.admit(claim(4, "p", TWO, free), NOW + timedelta(seconds=5)).granted
