"""What a model profile takes in (`ModelProfile.input_modalities`), and the refusal of a part
it does not."""

from __future__ import annotations

from collections.abc import Iterable

from otherone.definitions import ModelProfile
from otherone.parts import TextPart
from otherone.runs import AgentRunRequest

#: A profile's modalities when it declares none.
DEFAULT_INPUT_MODALITIES = ("text", "image", "file")


def input_modalities(profile: ModelProfile) -> tuple[str, ...]:
    declared = profile.input_modalities
    return DEFAULT_INPUT_MODALITIES if declared is None else ("text", *declared)


def modality_problem(profile: ModelProfile, used: Iterable[str]) -> str | None:
    """Why ``profile`` cannot take parts of the ``used`` modalities (None: it can)."""
    refused = sorted(set(used) - set(input_modalities(profile)))
    if not refused:
        return None
    return (
        f"model profile '{profile.id}' does not take {' or '.join(refused)} input "
        f"(its input_modalities are {list(input_modalities(profile))})"
    )


def request_parts_problem(
    request: AgentRunRequest, profile: ModelProfile, *, stored: bool = True
) -> str | None:
    """Why a run cannot take its input's parts (None: it can): a part that still carries
    bytes (a start that bypassed `AgentClient`, which stores them; ``stored`` False: before
    the client stored them) or a modality its profile does not take."""
    if isinstance(request.input, str):
        return None
    used: set[str] = set()
    for index, message in enumerate(request.input):
        if isinstance(message.content, str):
            continue
        for number, part in enumerate(message.content):
            if isinstance(part, TextPart):
                continue
            if stored and not part.is_stored:
                return (
                    f"input.{index}.content.{number}: an image or file must be stored where the "
                    "request enters (AgentClient stores it): a run's input carries references"
                )
            used.add(part.type)
    return modality_problem(profile, used)
