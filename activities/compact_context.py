"""The compaction step of a model call: when `compaction.plan_compaction` says the context nears
the window, a summary model call replaces its older part; the summary is stored (idempotently,
keyed by run and turn) and announced as `context_compacted`."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from otherone.activities.compaction import (
    SUMMARY_INSTRUCTIONS,
    plan_compaction,
    summary_chunks,
    summary_messages,
    with_dropped_attachments,
)
from otherone.activities.context import generation_settings
from otherone.activities.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    TextDelta,
    UsageReport,
)
from otherone.activities.shared import ActivityContext, failure
from otherone.activities.store_calls import heartbeating
from otherone.contracts import ModelCallInput, RunRef
from otherone.definitions import ModelOverrides, ModelProfile
from otherone.errors import FailureCode
from otherone.pricing import CallTokens, call_cost
from otherone.run_types import plain_decimal
from otherone.store import Compaction, EntryRow, estimate_tokens


async def compact_context(
    context: ActivityContext,
    provider: ModelProvider,
    request: ModelRequest,
    input: ModelCallInput,
    system_prompt: str,
    rows: list[EntryRow],
    summary: str | None,
) -> tuple[list[EntryRow], str | None, Summary | None]:
    """Summarise the older part of the context when it nears the window (the seed's rule);
    the rows and summary the model sees, and the summary call made here (its usage counts
    in the run's), if any."""
    fixed = estimate_tokens(system_prompt + json.dumps(request.tools) + (summary or ""))
    plan = plan_compaction(
        rows,
        fixed_tokens=fixed,
        context_window=input.context_window,
        threshold=input.compaction_threshold,
    )
    if plan is None:
        return rows, summary, None
    provider, summary_request = await _summary_request(context, provider, request, input)
    written = await _summarise_in_parts(
        provider,
        dataclasses.replace(summary_request, tools=[], purpose="summary"),
        summary,
        plan.summarise,
        budget=int(input.context_window * input.compaction_threshold)
        - estimate_tokens(SUMMARY_INSTRUCTIONS + (summary or "")),
    )
    written = written.priced(summary_request.profile)
    text = with_dropped_attachments(written.text, plan.summarise)
    ref = input.run_ref
    await context.io(
        context.store.add_compaction,
        ref.partition_key,
        ref.session_id,
        key=compaction_key(ref, input.turn),
        summary=text,
        up_to_entry_id=plan.up_to_entry_id,
        tokens=estimate_tokens(text),
        usage={
            "input_tokens": written.input_tokens,
            "output_tokens": written.output_tokens,
            "calls": written.calls,
            # Only when priced: a summary's stored usage is as it was for unpriced profiles.
            **({} if written.cost is None else {"cost": plain_decimal(written.cost)}),
        },
    )
    await context.emit(
        ref,
        {
            "type": "context_compacted",
            "turn": input.turn,
            "summarised_entries": len(plan.summarise),
            "kept_entries": len(plan.keep),
        },
    )
    return list(plan.keep), text, written


async def _summarise_in_parts(
    provider: ModelProvider,
    request: ModelRequest,
    summary: str | None,
    rows: tuple[EntryRow, ...],
    *,
    budget: int,
) -> Summary:
    """One summary of ``rows`` (after ``summary``), written a part at a time when they do not
    fit one request (`summary_chunks`): each part's summary carries into the next."""
    chunks, omitted = summary_chunks(rows, max(budget, 1))
    written: Summary | None = None
    for chunk in chunks:
        messages = summary_messages(summary, chunk, omitted=omitted)
        part = await summarise(provider, dataclasses.replace(request, messages=messages))
        written = part if written is None else written.then(part)
        summary, omitted = part.text, 0
    assert written is not None  # a plan summarises two entries at least
    return written


def compaction_key(ref: RunRef, turn: int) -> str:
    """The key of the compaction a run's turn makes (one per turn, however many attempts)."""
    return f"{ref.run_id}:t{turn}:compaction"


def stored_summary(latest: Compaction | None, ref: RunRef, turn: int) -> Summary | None:
    """The summary call an earlier attempt of this turn made, when ``latest`` (the session's
    latest compaction) is that attempt's: its usage still counts (the retry, finding the
    context cut, makes none). Tokens unknown when it was stored without them."""
    if latest is None or latest.compaction_key != compaction_key(ref, turn):
        return None
    usage = latest.usage or {}
    return Summary(
        text=latest.summary,
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        calls=_count(usage.get("calls")) or 1,
        cost=stored_cost(usage.get("cost")),
    )


def stored_cost(value: object) -> Decimal | None:
    """A cost as the store keeps it in usage JSON (a decimal string), or None."""
    if not isinstance(value, str):
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return None


def _sum(first: int | None, second: int | None) -> int | None:
    return None if first is None or second is None else first + second


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def _summary_request(
    context: ActivityContext,
    provider: ModelProvider,
    request: ModelRequest,
    input: ModelCallInput,
) -> tuple[ModelProvider, ModelRequest]:
    """The runtime policy's `summary_model` writes summaries when set, else the agent's."""
    snapshot = await context.snapshot(input.run_ref.snapshot_version)
    profile_id = snapshot.policy.summary_model
    if profile_id is None or profile_id == request.profile.id:
        return provider, request
    profile = snapshot.models[profile_id]
    summariser = context.provider_for(profile, "summary model")
    # The summary profile's own settings: the agent's overrides are for its turns.
    agent = snapshot.agent(input.run_ref.agent_id).model_copy(
        update={"model_overrides": ModelOverrides()}
    )
    settings = generation_settings(profile, agent)
    return summariser, dataclasses.replace(request, profile=profile, settings=settings)


@dataclasses.dataclass(frozen=True)
class Summary:
    """A summary model call's text and the tokens it used (None: the provider did not say)."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Model calls it took (a backlog too big for one request is summarised in parts).
    calls: int = 1
    #: What the calls cost (US dollars; None: not priced).
    cost: Decimal | None = None

    def priced(self, profile: ModelProfile) -> Summary:
        """This summary with its calls' cost at ``profile``'s prices."""
        tokens = CallTokens(input=self.input_tokens or 0, output=self.output_tokens or 0)
        return dataclasses.replace(self, cost=call_cost(profile, tokens))

    def then(self, later: Summary) -> Summary:
        """This summary's calls followed by ``later``'s (whose text is the summary now)."""
        return Summary(
            later.text,
            _sum(self.input_tokens, later.input_tokens),
            _sum(self.output_tokens, later.output_tokens),
            self.calls + later.calls,
        )

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


async def summarise(provider: ModelProvider, request: ModelRequest) -> Summary:
    """Stream a summary, heartbeating meanwhile (a slow summary keeps its activity alive)."""
    parts: list[str] = []
    usage = UsageReport()
    try:
        async with heartbeating():
            async for event in provider.stream(request):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, UsageReport):
                    usage = UsageReport(
                        input_tokens=_latest(event.input_tokens, usage.input_tokens),
                        output_tokens=_latest(event.output_tokens, usage.output_tokens),
                    )
    except ProviderError as error:
        delay = timedelta(seconds=error.retry_after) if error.retry_after else None
        # The seed's rule: building the context failed (a retryable provider fault is still
        # retried by Temporal; the run's failure says the context could not be built).
        raise failure(
            FailureCode.CONTEXT_ERROR,
            f"compaction: {error.message}",
            retryable=error.retryable,
            next_retry_delay=delay,
        ) from error
    text = "".join(parts).strip() or "(no summary)"
    return Summary(text, usage.input_tokens, usage.output_tokens)


def _latest(reported: int | None, known: int | None) -> int | None:
    """Providers may report usage in pieces (input first, output at the end)."""
    return reported if reported is not None else known
