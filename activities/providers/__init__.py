"""Model providers: one module per wire format, all behind the `ModelProvider` seam."""

from otherone.activities.providers.anthropic import AnthropicProvider
from otherone.activities.providers.base import ModelProvider
from otherone.activities.providers.openai import OpenAIChatProvider
from otherone.activities.providers.scripted import ScriptedProvider


def default_providers() -> dict[str, ModelProvider]:
    """The providers a worker has unless told otherwise, by `ModelProfile.provider`."""
    chat_completions = OpenAIChatProvider()
    return {
        "scripted": ScriptedProvider(),
        "openai": chat_completions,
        "openrouter": chat_completions,
        "local": chat_completions,
        "anthropic": AnthropicProvider(),
    }


__all__ = [
    "AnthropicProvider",
    "ModelProvider",
    "OpenAIChatProvider",
    "ScriptedProvider",
    "default_providers",
]
