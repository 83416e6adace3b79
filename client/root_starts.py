"""A root run's start as Temporal sees it: its workflow id (derived from the idempotency key),
its search attributes, and the summary and details the Web UI shows (`AgentClient.start`); and
the store's say on it (a busy session refuses the start).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from otherone import search_attributes as attrs
from otherone.runs import AgentRunRequest, ForkOrigin, RunStatus
from otherone.store import SessionBusyError

if TYPE_CHECKING:
    from otherone.config import RuntimeConfig
    from otherone.store import Store
    from otherone.store.records import KeyedRun

_UNREADABLE = re.compile(r"[^A-Za-z0-9_.-]+")
_READABLE_KEY_CHARS = 48


def root_run_id(request: AgentRunRequest) -> str:
    """Workflow id of a root run, readable in `temporal workflow list` and the Web UI.

    Keyed: ``<readable key>-<16 hex digits of SHA-256 of partition NUL key>``, e.g.
    ``invoice-42-3f9a1c0b7d2e4f6a``: a pure function of (partition, key), so the same key is
    the same workflow id whatever the request says and Temporal's id policies find the reuse
    (the agent is part of the request, so it is shown by the summary and `OtheroneAgentId`,
    not by a keyed id: docs/workflow-contract.md "Ids"). Without a key: ``<agent>-<random>``.
    """
    key = request.idempotency_key
    if key is None:
        return f"{request.entry_agent}-{uuid.uuid4().hex[:20]}"
    digest = _key_digest(request.runtime_context.partition_key, key)
    return f"{_readable_key(key) or 'key'}-{digest[:16]}"


def legacy_root_run_id(request: AgentRunRequest) -> str | None:
    """The id a keyed root had before readable ids (``run-`` + 40 hex digits), or None."""
    key = request.idempotency_key
    if key is None:
        return None
    return f"run-{_key_digest(request.runtime_context.partition_key, key)[:40]}"


async def legacy_run(temporal: Client, request: AgentRunRequest) -> str | None:
    """The key's run if an earlier version started it (under `legacy_root_run_id`).

    Only a start racing with an earlier version's start of the same key can still make two
    runs; once every client runs this version the new id alone decides.
    """
    legacy = legacy_root_run_id(request)
    if legacy is None:
        return None
    try:
        await temporal.get_workflow_handle(legacy).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return legacy


def _key_digest(partition: str, key: str) -> str:
    return hashlib.sha256(f"{partition}\x00{key}".encode()).hexdigest()


def _readable_key(key: str) -> str:
    """The key's letters, digits and ``_.-`` (other runs become one ``-``), at most 48: no
    ``/`` (children's ids nest under their caller's with it), nothing a shell or URL quotes."""
    slug = _UNREADABLE.sub("-", key).strip("-._")
    return slug[:_READABLE_KEY_CHARS].rstrip("-._")


def root_search_attributes(
    request: AgentRunRequest, forked_from: ForkOrigin | None = None
) -> TypedSearchAttributes:
    """Our search attributes of a root run, set by its start."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(attrs.AGENT_ID, request.entry_agent),
        SearchAttributePair(attrs.DEPTH, 0),
        SearchAttributePair(attrs.PARTITION, request.runtime_context.partition_key),
        SearchAttributePair(attrs.STATUS, RunStatus.RUNNING.value),
    ]
    if request.session.session_id:
        pairs.append(SearchAttributePair(attrs.SESSION_ID, request.session.session_id))
    if forked_from is not None:
        pairs.append(SearchAttributePair(attrs.FORKED_FROM, forked_from.run_id))
    return TypedSearchAttributes(pairs)


def start_summary(request: AgentRunRequest) -> str:
    """The run's one-line summary in the Web UI and `temporal workflow list`."""
    text = request.input if isinstance(request.input, str) else request.input[-1].text
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    return f"{request.entry_agent}: {first_line[:120]}"


def start_details(request: AgentRunRequest, config: RuntimeConfig | None) -> str:
    """What the Web UI shows on the run's page without opening payloads (markdown): the agent,
    its model and tools when this client has the workers' configuration, the request's limits,
    tenant, session and idempotency key."""
    lines = [f"**agent** `{request.entry_agent}`"]
    agent = config.agents.get(request.entry_agent) if config is not None else None
    if config is not None and agent is not None:
        lines.append(f"**model** `{agent.model or config.default_model or '-'}`")
        lines.append(f"**tools** {agent.tools.model_dump_json()}")
    if request.limits is not None:
        lines.append(f"**limits** {request.limits.model_dump_json(exclude_none=True)}")
    lines.append(f"**partition** `{request.runtime_context.partition_key}`")
    if request.session.session_id:
        lines.append(f"**session** `{request.session.session_id}`")
    if request.idempotency_key is not None:
        lines.append(f"**idempotency key** `{request.idempotency_key[:200]}`")
    return "  \n".join(lines)


def with_session_id(request: AgentRunRequest) -> AgentRunRequest:
    """``request``, naming a new session (``session-<uuid4>``) when it names none.

    Chosen by the client rather than by the run (which does the same for a start that names
    none, e.g. `temporal workflow start`) so that the start itself sets the run's
    `OtheroneSessionId` search attribute and the Web UI details show the session: no upsert in
    the run's history (one event and one visibility write fewer per run, issue 17). Only once
    the idempotency fingerprint is taken: a repeated start of the same key is still the same
    request.
    """
    if request.session.session_id:
        return request
    session = request.session.model_copy(update={"session_id": f"session-{uuid.uuid4()}"})
    return request.model_copy(update={"session": session})


async def check_session_free(
    store: Store | None,
    request: AgentRunRequest,
    run_id: str,
    still_running: Callable[[str], Awaitable[bool]],
) -> None:
    """With the store: a session another live run writes to refuses the start
    (`SessionBusyError`), and no workflow is left behind. (Two starts racing for a free
    session both pass here; the second run then ends `failed/session_busy`.)

    A holder Temporal reports ended (``still_running`` false: terminated from outside, so its
    finish never gave the lease back) holds nothing: its lease is released here."""
    session_id = request.session.session_id
    if store is None or session_id is None:
        return
    partition = request.runtime_context.partition_key
    holder = await asyncio.to_thread(store.session_holder, partition, session_id)
    if holder is None or holder == run_id:  # the same run again is a join, not busy
        return
    if await still_running(holder):
        raise SessionBusyError(session_id, holder)
    await asyncio.to_thread(store.release_session, partition, session_id, holder)


async def keyed_run(store: Store | None, partition_key: str, run_id: str) -> KeyedRun | None:
    """What the store knows of the keyed root ``run_id`` (`Store.keyed_run`): checked before
    every keyed start, since once Temporal no longer keeps the run (namespace retention) a start
    would make a new run under its id. None without a store, or when the store does not answer
    (the start then has Temporal's retention-bound idempotency only; the run itself waits for
    the store)."""
    if store is None:
        return None
    from otherone.client.store_answers import answered

    try:
        return await answered(store.keyed_run, partition_key, run_id)
    except Exception as error:
        if _unanswered(error):
            return None
        raise


async def keep_fingerprint(
    store: Store | None, partition_key: str, run_id: str, fingerprint: str
) -> None:
    """Keep the key's request fingerprint in the store, once Temporal's memo confirmed it (the
    next start of the key is answered from the store: `keyed_run`). A store that does not
    answer keeps nothing now: the next start of the key, while Temporal keeps the run, does."""
    if store is None:
        return
    from otherone.client.store_answers import answered

    try:
        await answered(store.keep_idempotency_fingerprint, partition_key, run_id, fingerprint)
    except Exception as error:
        if not _unanswered(error):
            raise


def _unanswered(error: Exception) -> bool:
    """A store that is down, or whose schema predates kept fingerprints (a client opens the
    store without migrating it: the workers' start does; SQLite reports the missing table as
    an `OperationalError`, an outage, PostgreSQL as undefined_table)."""
    import sqlalchemy.exc

    from otherone.store.errors import StoreError, is_outage

    if is_outage(error) or isinstance(error, StoreError):
        return True
    sqlstate = getattr(getattr(error, "orig", None), "sqlstate", None)
    return isinstance(error, sqlalchemy.exc.ProgrammingError) and sqlstate == "42P01"
