"""A run's input, decoded and checked in the workflow itself.

`AgentRunWorkflow` takes its input raw: input that does not fit `RunInput` (e.g. a start from
Temporal's own client) would otherwise fail every workflow task, for ever. Here it becomes the
run's input, or a stand-in and the reason the run is refused (`invalid_request`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import (
    RawValue,
    SearchAttributeKey,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import RunInput, RunPlan, RunRef
    from otherone.runs import AgentFailure, AgentRunRequest, AgentRunResult, RunOutcome, RunStatus


#: The input of a start that sent none (``temporal workflow start`` without ``--input``): the
#: workflow's parameter defaults to it, so the run is refused instead of its every workflow
#: task failing on a missing argument (a run no cancel can end).
NO_INPUT = RawValue(Payload())

_Function = TypeVar("_Function", bound=Callable[..., Any])


def one_raw_input(function: _Function) -> _Function:
    """``function(self, *inputs)``, shown to Temporal as ``function(self, input: RawValue =
    NO_INPUT)``.

    The SDK decodes a start's arguments by the run method's type hints only when their count
    matches: one argument then arrives raw (`decode_input` checks it), none takes the default.
    Two (``temporal workflow start --input A --input B``) arrive decoded without hints, and a
    run method of one parameter would raise `TypeError` on every workflow task, for ever (a
    run no cancel can end). Taking ``*inputs`` behind a one-parameter signature keeps the
    typed path and lets the run refuse the extra inputs (`invalid_request`).
    """
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    raw = inspect.Parameter(
        "input", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=NO_INPUT, annotation=RawValue
    )
    returned = function.__annotations__.get("return", inspect.Signature.empty)
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_parameter, raw], return_annotation=returned
    )
    function.__annotations__ = {"input": RawValue, "return": returned}
    return function


def decode_input(inputs: tuple[Any, ...]) -> tuple[RunInput, str | None]:
    """The run's input, or a stand-in naming this workflow and why the input was refused.

    A subclass registered in its place (a changed version, as a deploy brings) may declare
    ``RunInput`` and hand over the decoded input.
    """
    if len(inputs) > 1:
        return _stand_in(), (
            f"invalid run input: {len(inputs)} inputs were given (start with one RunInput argument)"
        )
    raw = inputs[0] if inputs else NO_INPUT
    if isinstance(raw, RunInput):
        return raw, None
    if raw is NO_INPUT:
        return _stand_in(), "invalid run input: none was given (start with one RunInput argument)"
    try:
        decoded = workflow.payload_converter().from_payload(raw.payload, RunInput)
    except ValidationError as error:
        with_ids = _with_workflow_ids(raw, error)
        if with_ids is not None:
            return with_ids, None
        return _stand_in(), f"invalid run input: {validation_problems(error)}"
    except Exception as error:  # not JSON at all, or an encoding we do not know
        return _stand_in(), f"invalid run input: {type(error).__name__}: {error}"
    if not isinstance(decoded, RunInput):
        return _stand_in(), "invalid run input: not a RunInput object"
    return decoded, None


def _with_workflow_ids(raw: RawValue, error: ValidationError) -> RunInput | None:
    """A root's input that leaves out ``run_id`` and ``root_run_id`` (all it lacks), given
    the workflow id as both: a Temporal schedule starts each run under an id of its own
    (``<workflow id>-<time>``) from one fixed input, which cannot name it."""
    missing = {(item["type"], tuple(item["loc"])) for item in error.errors()}
    ids = {("missing", ("run_id",)), ("missing", ("root_run_id",))}
    if not missing or not missing <= ids:
        return None
    try:
        fields = json.loads(raw.payload.data)
        if not isinstance(fields, dict) or fields.get("parent_run_id") is not None:
            return None
        workflow_id = workflow.info().workflow_id
        return RunInput.model_validate_json(
            json.dumps({**fields, "run_id": workflow_id, "root_run_id": workflow_id})
        )
    except (ValueError, ValidationError):
        return None


def id_problem(input: RunInput) -> str | None:
    """Why the input's ids cannot be this run's: the workflow id is the run id of every run
    (the store, events and children are keyed by it), and a root is its own root."""
    workflow_id = workflow.info().workflow_id
    if input.run_id != workflow_id:
        return f"invalid run input: run_id: must be the workflow id '{workflow_id}'"
    if input.parent_run_id is None and input.root_run_id != input.run_id:
        return f"invalid run input: root_run_id: a root run's must be its run id '{workflow_id}'"
    return None


def root_problem(input: RunInput) -> str | None:
    """Why a run that is its own root (root_run_id = run_id) cannot run as given: a root has
    no parent and depth 0 (a plain client could set them, and the run would count as a child:
    depth limits, a caller to report to)."""
    if input.root_run_id != input.run_id:
        return None
    if input.parent_run_id is not None:
        return "invalid run input: parent_run_id: a root run (root_run_id = run_id) has none"
    if input.depth != 0:
        return "invalid run input: depth: a root run (root_run_id = run_id) is at depth 0"
    return None


def missing_search_attributes(
    input: RunInput, present: TypedSearchAttributes
) -> list[SearchAttributeUpdate[Any]]:
    """Our search attributes of this run that its start did not set."""
    wanted: list[tuple[SearchAttributeKey[Any], Any]] = [
        (attrs.AGENT_ID, input.request.entry_agent),
        (attrs.DEPTH, input.depth),
        (attrs.PARTITION, input.request.runtime_context.partition_key),
        (attrs.STATUS, RunStatus.RUNNING.value),
    ]
    if input.agent_call_id is not None:
        wanted.append((attrs.CALL_ID, input.agent_call_id))
    return [key.value_set(value) for key, value in wanted if present.get(key) is None]


def validation_problems(error: ValidationError, limit: int = 5) -> str:
    """`field.path: message` for the first few problems (the input itself is not repeated)."""
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or '(input)'}: {item['msg']}"
        for item in error.errors()[:limit]
    ]
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def run_ref(input: RunInput, session_id: str, plan: RunPlan | None) -> RunRef:
    """What activities (and the `run_ref` query) need to know of the run: its ids and scope."""
    return RunRef(
        run_id=input.run_id,
        root_run_id=input.root_run_id,
        parent_run_id=input.parent_run_id,
        agent_call_id=input.agent_call_id,
        agent_id=input.request.entry_agent,
        depth=input.depth,
        partition_key=input.request.runtime_context.partition_key,
        session_id=session_id,
        snapshot_version=plan.snapshot_version if plan else (input.snapshot_version or ""),
        include_thinking_events=input.request.include_thinking_events,
        event_visibility=input.request.event_visibility,
    )


def refused_result(input: RunInput, failure: AgentFailure) -> AgentRunResult:
    """The result of a run whose input was refused: nothing was prepared, nothing is written."""
    return AgentRunResult(
        run_id=input.run_id,
        root_run_id=input.root_run_id,
        agent_id=input.request.entry_agent,
        session_id="",
        outcome=RunOutcome.FAILED,
        failure=failure,
    )


def _stand_in() -> RunInput:
    """Ids for the refusal's result and record: the workflow id is the run id of every run."""
    run_id = workflow.info().workflow_id
    request = AgentRunRequest.model_construct(entry_agent="", input="")
    return RunInput.model_construct(run_id=run_id, root_run_id=run_id, request=request)
