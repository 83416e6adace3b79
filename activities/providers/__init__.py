"""Model providers: one module per wire format, all behind the `ModelProvider` seam."""

from activities.providers.base import ModelProvider
from activities.providers.scripted import ScriptedProvider


def default_providers() -> dict[str, ModelProvider]:
    """The providers a worker has unless told otherwise, by `ModelProfile.provider`."""
    return {"scripted": ScriptedProvider()}


__all__ = ["ModelProvider", "ScriptedProvider", "default_providers"]
