"""Tools of the example runtime. Offline and deterministic, so demos and tests are repeatable."""

from __future__ import annotations

import zlib
from typing import Any

from otherone.tools import tool

__all__ = ["add", "get_weather"]

_KNOWN_WEATHER: dict[str, tuple[str, int, int]] = {
    "paris": ("sunny", 21, 12),
    "london": ("light rain", 14, 22),
    "berlin": ("cloudy", 17, 15),
    "tokyo": ("clear", 24, 8),
    "new york": ("windy", 19, 31),
}
_CONDITIONS = ("sunny", "cloudy", "light rain", "clear", "windy", "foggy")


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city (example data: deterministic, no network).

    Args:
        city: Name of the city, e.g. "Paris".
    """
    name = city.strip()
    condition, temperature_c, wind_kmh = _KNOWN_WEATHER.get(name.lower()) or _made_up(name)
    return {
        "city": name,
        "condition": condition,
        "temperature_c": temperature_c,
        "wind_kmh": wind_kmh,
    }


def _made_up(city: str) -> tuple[str, int, int]:
    """Stable pseudo-weather for any other city (crc32, unlike hash(), is not salted per run)."""
    seed = zlib.crc32(city.lower().encode("utf-8"))
    return _CONDITIONS[seed % len(_CONDITIONS)], 5 + seed % 25, 3 + (seed >> 8) % 40


@tool
def add(a: float, b: float) -> float:
    """Add two numbers and return the sum.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
