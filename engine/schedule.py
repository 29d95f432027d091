"""The N/I chunk schedule, as pure functions of the chunk index.

Execution order is ``N0 -> N1 -> I0 -> N2 -> I1 -> ...``. N_k generates latents
``[kC, (k+1)C)``; I_k re-generates the seam ``[B - s, B + s)`` around ``B = (k+1)C``,
anchored on ``a`` clean latents on each side, and its anchor predictions are dropped.
Each latent is published exactly once, in timeline order, as soon as nothing later
in the schedule will replace it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.config import ScheduleConfig


@dataclass(frozen=True)
class ChunkPlan:
    """One unit of work for the A2V stage, in global latent indices."""

    kind: Literal["N", "I"]
    index: int
    span: tuple[int, int]  # latents the model sees as its own tokens (anchors included)
    generate: tuple[int, int]  # latents it produces and keeps
    publish: tuple[int, int]  # latents final once this chunk is done (may be empty)

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"

    @property
    def anchors(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Clean latents on the left and right of ``generate`` inside ``span``."""
        return (self.span[0], self.generate[0]), (self.generate[1], self.span[1])


@dataclass(frozen=True)
class ChunkSchedule:
    config: ScheduleConfig

    def n_chunk(self, k: int) -> ChunkPlan:
        c, s = self.config.chunk, self.config.seam
        start, end = k * c, (k + 1) * c
        if not self.config.interp:
            publish = (start, end)
        elif k == 0:
            publish = (0, end - s)
        else:
            publish = (start - s, start - s)  # waits for I_{k-1}
        return ChunkPlan("N", k, (start, end), (start, end), publish)

    def i_chunk(self, k: int) -> ChunkPlan:
        """The seam between N_k and N_{k+1}; publishes the seam and N_{k+1}'s middle."""
        if not self.config.interp:
            raise ValueError("interpolation is switched off")
        c, s, a = self.config.chunk, self.config.seam, self.config.anchor
        b = (k + 1) * c
        return ChunkPlan("I", k, (b - s - a, b + s + a), (b - s, b + s), (b - s, b + c - s))

    def tail(self, last_n: int) -> tuple[int, int]:
        """What is left to publish when the stream ends after N_{last_n} (and I_{last_n - 1})."""
        end = (last_n + 1) * self.config.chunk
        if not self.config.interp:
            return end, end
        return end - self.config.seam, end

    def order(self, n_chunks: int) -> list[ChunkPlan]:
        """The full execution order for a stream of ``n_chunks`` N chunks."""
        plans: list[ChunkPlan] = []
        for k in range(n_chunks):
            plans.append(self.n_chunk(k))
            if self.config.interp and k >= 1:
                plans.append(self.i_chunk(k - 1))
        return plans
