"""Fork a run from one of its turns (`AgentClient.fork`, ``otherone fork``, ``POST
/v1/runs/{id}/fork``).

**Turns.** A run's transcript is its session's entries up to the last one the run wrote (a
session continued by several runs: a later run's transcript holds the earlier runs' turns
too). A *turn* is a user message (an entry of role ``user`` that a person sent: the run's
input or a message sent to it while it ran; not the runtime's own notes, such as an answer's
output retry feedback or a handoff note) and every entry after it up to the next user
message: the model's answers, its tool calls and their results. Turns are numbered from 1 in
transcript order (`otherone show` lists them).

**A fork at turn N** is a new root run in a new session that shares the original's entries
before turn N's user message (turns 1..N-1, by reference: `otherone.store.forks`) and runs
turn N again: its input is turn N's user message, or the one given instead. Its first model
call so receives exactly the messages the original's first call of turn N received. It runs
the original's definitions (the configuration snapshot its start pinned) or, on request, the
current ones; its record says where it came from (`RunRecord.forked_from`, the
``OtheroneForkedFrom`` search attribute). The original run and session are not touched.

Only roots are forked (a child's transcript is its caller's business: fork the root). A run
still going may be forked: the turns before N are complete once turn N's message is stored.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from otherone.client.run_handles import RunHandle
from otherone.client.store_answers import answered
from otherone.errors import InvalidRequestError, RunNotFoundError
from otherone.runs import AgentRunRequest, ForkOrigin, RunRecord, RuntimeContext, SessionTarget

if TYPE_CHECKING:
    from otherone.client.agent_client import AgentClient
    from otherone.store import Store
    from otherone.store.records import EntryRow

Definition = Literal["original", "current"]
DEFINITIONS: tuple[Definition, ...] = ("original", "current")
#: Keys of the user entries the runtime writes itself (not a person's message).
_RUNTIME_NOTE_SUFFIXES = (":output-retry",)


class ForkHandle(RunHandle):
    """The handle of a fork's root run, with the session it writes to (a new one) and
    where it came from."""

    def __init__(
        self, client: AgentClient, run_id: str, session_id: str, forked_from: ForkOrigin
    ) -> None:
        super().__init__(client, run_id)
        self.session_id = session_id
        self.forked_from = forked_from


@dataclass(frozen=True)
class Turn:
    """One turn of a run's transcript: its number (from 1), its user message and its
    entries (the message first)."""

    number: int
    message: str
    entries: tuple[EntryRow, ...]

    @property
    def first_entry_id(self) -> int:
        return self.entries[0].id or 0

    @property
    def tool_calls(self) -> int:
        return sum(len(entry.tool_calls or ()) for entry in self.entries)


def is_user_message(entry: EntryRow) -> bool:
    """Whether ``entry`` starts a turn: a message a person sent (see the module)."""
    if entry.role != "user":
        return False
    if entry.meta and "handoff" in entry.meta:
        return False
    return not entry.entry_key.endswith(_RUNTIME_NOTE_SUFFIXES)


def turns_of(entries: list[EntryRow], run_id: str) -> list[Turn]:
    """The turns of run ``run_id`` in its session's ``entries`` (see the module)."""
    last = max((entry.id or 0 for entry in entries if entry.run_id == run_id), default=0)
    turns: list[list[EntryRow]] = []
    for entry in entries:
        if (entry.id or 0) > last:
            break
        if is_user_message(entry):
            turns.append([entry])
        elif turns:
            turns[-1].append(entry)
    return [
        Turn(number=index, message=found[0].content, entries=tuple(found))
        for index, found in enumerate(turns, start=1)
    ]


async def run_turns(store: Store, record: RunRecord) -> list[Turn]:
    """The turns of the run ``record`` is of, read from the store."""
    if not record.session_id:
        return []
    entries = await answered(store.load_entries, record.partition_key, record.session_id)
    return turns_of(entries, record.run_id)


async def stored_root(client: AgentClient, run_id: str) -> RunRecord:
    """The store's record of root run ``run_id`` as ``client`` may see it: another
    partition's run is not found (as for every run call of a scoped client)."""
    store = _store(client)
    if client.partition_key is not None:
        record = await answered(store.get_run_record, client.partition_key, run_id)
    else:
        record = await answered(store.find_run_record, run_id)
    if record is None:
        raise RunNotFoundError(run_id)
    if record.parent_run_id is not None or record.root_run_id != record.run_id:
        raise InvalidRequestError(
            f"'{run_id}' is a child run; only a root run can be forked (fork its root "
            f"'{record.root_run_id}')",
            field="run_id",
        )
    return record


async def fork_run(
    client: AgentClient,
    run_id: str,
    *,
    at_turn: int,
    input: str | None = None,
    definition: Definition = "original",
) -> ForkHandle:
    """`AgentClient.fork` (see the module)."""
    if definition not in DEFINITIONS:
        raise InvalidRequestError("must be 'original' or 'current'", field="definition")
    if input is not None and not input.strip():
        raise InvalidRequestError(
            "must not be empty (leave it out to run the turn's own message again)", field="input"
        )
    if isinstance(at_turn, bool) or not isinstance(at_turn, int) or at_turn < 1:
        raise InvalidRequestError("must be a turn number, 1 or more", field="at_turn")
    store = _store(client)
    record = await stored_root(client, run_id)
    turns = await run_turns(store, record)
    if at_turn > len(turns):
        raise InvalidRequestError(
            f"run '{run_id}' has {len(turns)} turn(s); there is no turn {at_turn}",
            field="at_turn",
        )
    snapshot = _snapshot(record, definition)
    turn = turns[at_turn - 1]
    assert record.session_id is not None  # it has turns
    session_id = f"session-{uuid.uuid4()}"
    await answered(
        store.fork_session,
        record.partition_key,
        record.session_id,
        session_id,
        turn.first_entry_id - 1,
    )
    request = AgentRunRequest(
        entry_agent=_entry_agent(record),
        input=turn.message if input is None else input,
        session=SessionTarget(session_id=session_id),
        runtime_context=RuntimeContext(partition_key=record.partition_key),
        metadata=record.metadata,
    )
    origin = ForkOrigin(run_id=record.run_id, turn=at_turn)
    fork_id = await client.start_fork(request, origin, snapshot)
    return ForkHandle(client, fork_id, session_id, origin)


def _snapshot(record: RunRecord, definition: Definition) -> str | None:
    """The snapshot the fork runs in: the original's (None: the workers' current one)."""
    if definition == "current":
        return None
    if record.snapshot_version is None:
        raise InvalidRequestError(
            f"the definition run '{record.run_id}' ran is not recorded (it started before "
            "forks were supported); fork it with the current definition",
            field="definition",
        )
    return record.snapshot_version


def _entry_agent(record: RunRecord) -> str:
    """The agent the original was started with (a handoff changes its record's agent)."""
    return record.handoffs[0].from_agent if record.handoffs else record.agent_id


def _store(client: AgentClient) -> Store:
    if client.store is None:
        raise InvalidRequestError("forking a run needs a store", field="store")
    return client.store
