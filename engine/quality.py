"""Quality levels: the knobs the scheduler may turn down under load, cheapest loss first.

Level 0 is the configured engine. Each further level gives up one thing: I chunks (seam
smoothing), then one denoising step, then audio guidance. A session changes level only at
a chunk boundary; frames stay published exactly once, in order, across a change.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quality:
    interp: bool = True  # run I chunks
    steps: int | None = None  # denoising steps of N chunks; None: the config's
    guidance: bool = True  # audio guidance where the config has it

    def __post_init__(self) -> None:
        if self.steps is not None and not 1 <= self.steps <= 8:
            raise ValueError(f"steps must be in 1..8, got {self.steps}")

    @property
    def name(self) -> str:
        parts = ["interp" if self.interp else "no-interp", f"steps={self.steps or 'cfg'}"]
        parts.append("guided" if self.guidance else "unguided")
        return ",".join(parts)


def quality_ladder(steps: int, interp: bool = True, guided: bool = True) -> tuple[Quality, ...]:
    """Levels 0..n for an engine with ``steps`` denoising steps; a rung that changes nothing
    (no I chunks to drop, one step already, no guidance) is left out."""
    levels = [Quality(interp, steps, guided)]
    if interp:
        levels.append(Quality(False, steps, guided))
    if steps > 1:
        levels.append(Quality(False, steps - 1, guided))
    if guided:
        levels.append(Quality(False, max(1, steps - 1), False))
    return tuple(levels)
