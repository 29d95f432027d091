"""The presets a session may ask for, and the one it gets when it names none."""

from __future__ import annotations

from enum import StrEnum


class Preset(StrEnum):
    """How a session's chunks are scheduled: ``quality`` runs I chunks at the config's chunk size;
    ``fast`` runs none, at the config's smaller ``fast`` chunk and steps (less audio to wait for,
    less compute per chunk)."""

    QUALITY = "quality"
    FAST = "fast"


# On 2 CPU cores only `fast` keeps real time.
DEFAULT_PRESET = Preset.FAST


def preset_named(name: str) -> Preset:
    """The preset called ``name``; ``KeyError`` for any other name."""
    try:
        return Preset(name)
    except ValueError:
        raise KeyError(f"unknown preset {name!r}; choose {' or '.join(Preset)}") from None
