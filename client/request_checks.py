"""What a client checks before it sends anything: request fields (`build_request`), user
messages, run ids, and, when it knows the workers' configuration, the entry agent and limits.
A bad value is an `InvalidRequestError` naming its field, never a traceback or a run that fails.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from otherone.errors import InvalidRequestError
from otherone.model_choices import model_choice_problem
from otherone.parts import FilePart, ImagePart, QueuedMessage, TextPart, parts_text
from otherone.runs import MAX_INPUT_BYTES, AgentRunRequest, unstorable_problem

if TYPE_CHECKING:
    from otherone.config import RuntimeConfig
    from otherone.definitions import AgentDefinition

MAX_MESSAGES_PER_SIGNAL = 64
_RUN_ID = re.compile(r"[A-Za-z0-9_./:-]{1,1000}")
#: Parts of a pydantic error location that name a union member (``str``, ``tuple[...]``).
_TYPE_TAG = re.compile(r"^(str|int|float|bool|dict|list|tuple|bytes|none)$|[][,]")


def build_request(**fields: Any) -> AgentRunRequest:
    """Validate request fields; a bad one raises `InvalidRequestError` naming it (no traceback)."""
    try:
        return AgentRunRequest.model_validate(fields)
    except ValidationError as error:
        field, message = most_specific(error)
        raise InvalidRequestError(message, field=field) from None


def most_specific(error: ValidationError) -> tuple[str, str]:
    """The deepest problem's field path, without pydantic's union tags (``input.str``).

    A union (``input``: text or messages) reports one error per member: a bad ``role`` in a
    message must be named as ``input.0.role``, not as "input should be a valid string";
    problems at the same place are joined with "or".
    """
    found: dict[str, list[str]] = {}
    for problem in error.errors(include_url=False):
        path = ".".join(str(part) for part in problem["loc"] if not _TYPE_TAG.search(str(part)))
        message = problem["msg"].removeprefix("Value error, ")
        found.setdefault(path, [])
        if message not in found[path]:
            found[path].append(message)
    field = max(found, key=lambda path: path.count(".") + bool(path))
    return field, " or ".join(found[field])


def check_root_run_id(root_run_id: str) -> None:
    """A root run id goes into a visibility query: only the characters run ids are made of."""
    if not _RUN_ID.fullmatch(root_run_id):
        raise InvalidRequestError("not a run id", field="root_run_id")


def check_against_config(request: AgentRunRequest, config: RuntimeConfig | None) -> None:
    """With the workers' configuration: an unknown entry agent or a limit override above
    the runtime's is a request error, refused here instead of by a run that fails."""
    if config is None:
        return
    if request.entry_agent not in config.agents:
        known = ", ".join(sorted(config.agents)) or "none"
        raise InvalidRequestError(
            f"agent '{request.entry_agent}' is not defined (defined: {known})",
            field="entry_agent",
        )
    try:
        config.limits.tightened(request.limits)
    except ValueError as error:
        field, _, message = str(error).partition(": ")
        raise InvalidRequestError(message, field=field) from None
    check_model_choice(request.model, config.agents[request.entry_agent], config)
    _check_modalities(request, config)


def _check_modalities(request: AgentRunRequest, config: RuntimeConfig) -> None:
    """An image or file for a profile that does not take it is refused before the start (the
    run would fail `invalid_request` at once: `request_parts_problem`)."""
    if isinstance(request.input, str):
        return
    from otherone.model_modalities import request_parts_problem

    profile_id = request.model or config.own_model(config.agents[request.entry_agent])
    profile = config.models.get(profile_id) if profile_id is not None else None
    problem = None if profile is None else request_parts_problem(request, profile, stored=False)
    if problem is not None:
        raise InvalidRequestError(problem, field="input")


def check_model_choice(
    requested: str | None, agent: AgentDefinition, config: RuntimeConfig
) -> None:
    """A request's ``model`` must be one its agent allows (its own, or one of its ``models``)."""
    if requested is None:
        return
    own = config.own_model(agent) or config.default_model or next(iter(config.models), None)
    problem = model_choice_problem(agent, requested, own) if own is not None else None
    if problem is not None:
        raise InvalidRequestError(problem, field="model")


PART_TYPES = (TextPart, ImagePart, FilePart)


def validate_messages(batch: tuple[QueuedMessage, ...]) -> None:
    """User messages for a run: 1 to `MAX_MESSAGES_PER_SIGNAL`, each storable text (or parts:
    some text or an image or file, their text storable)."""
    if not batch:
        raise InvalidRequestError("at least one message is required", field="messages")
    if len(batch) > MAX_MESSAGES_PER_SIGNAL:
        raise InvalidRequestError(
            f"at most {MAX_MESSAGES_PER_SIGNAL} messages at once", field="messages"
        )
    texts = [_message_text(message, f"messages.{index}") for index, message in enumerate(batch)]
    for index, message in enumerate(texts):
        problem = unstorable_problem(message)
        if problem is not None:
            raise InvalidRequestError(problem, field=f"messages.{index}")
        if len(message.encode("utf-8")) > MAX_INPUT_BYTES:
            raise InvalidRequestError(
                f"must be at most {MAX_INPUT_BYTES} bytes", field=f"messages.{index}"
            )
    _check_total(texts, "messages")


def _message_text(message: QueuedMessage, field: str) -> str:
    """The text of one message sent to a run; refused when it is empty."""
    if (
        isinstance(message, tuple | list)
        and message
        and all(isinstance(p, PART_TYPES) for p in message)
    ):
        if any(not isinstance(p, TextPart) for p in message):
            return parts_text(message)
        message = parts_text(message)
    if not isinstance(message, str) or not message.strip():
        raise InvalidRequestError(
            "must be a non-empty string (or parts with text, an image or a file)", field=field
        )
    return message


def check_input_size(request: AgentRunRequest) -> None:
    """A run's input messages together within `MAX_INPUT_BYTES` (each one is, by the model)."""
    if not isinstance(request.input, str):
        _check_total([message.text for message in request.input], "input")


def _check_total(texts: Sequence[str], field: str) -> None:
    """Several texts travel in one Temporal payload, capped by the server (2 MB by default):
    over it, Temporal refused the start or signal with "Blob data size exceeds limit"."""
    total = sum(len(text.encode("utf-8")) for text in texts)
    if total > MAX_INPUT_BYTES:
        raise InvalidRequestError(
            f"must be at most {MAX_INPUT_BYTES} bytes altogether (got {total})", field=field
        )
