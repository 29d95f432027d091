"""The N/I chunk schedule, as pure functions of the chunk index.

Execution order is ``N0 -> N1 -> I0 -> N2 -> I1 -> ...``. N_k generates latents
``[kC, (k+1)C)``; I_k re-generates the seam ``[B - s, B + s)`` around ``B = (k+1)C``,
anchored on ``a`` clean latents on each side, and its anchor predictions are dropped.
Each latent is published exactly once, in timeline order, as soon as nothing later
in the schedule will replace it.

I chunks can be switched on or off mid-stream (a session's quality level). A schedule then
holds ``since``: the first N chunk run with its setting, the other setting having run before
it. The first N chunk after switching on publishes like N0 (the seam before it was already
published whole); the first after switching off also publishes the seam latents the last
N chunk left waiting for an I chunk that will not come.
"""

from __future__ import annotations

import dataclasses
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
    since: int = 0  # the first N chunk run with ``config.interp`` (the other setting ran before)

    def switched(self, interp: bool, at: int) -> ChunkSchedule:
        """The schedule from N_at on with I chunks ``interp``: this one if that is no change."""
        if interp == self.config.interp:
            return self
        return ChunkSchedule(dataclasses.replace(self.config, interp=interp), at)

    def n_chunk(self, k: int) -> ChunkPlan:
        if k < self.since:
            raise ValueError(f"N{k} ran before this schedule's setting began at N{self.since}")
        c, s = self.config.chunk, self.config.seam
        start, end = k * c, (k + 1) * c
        if not self.config.interp:
            after_interp = k == self.since > 0  # N_{k-1} left its last seam latents for an I chunk
            publish = (start - s if after_interp else start, end)
        elif k == self.since:
            publish = (start, end - s)
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

    def i_after(self, k: int) -> ChunkPlan | None:
        """The I chunk that runs right after N_k: the seam before it, when both sides ran with I
        chunks on."""
        return self.i_chunk(k - 1) if self.config.interp and k > self.since else None

    def tail(self, last_n: int) -> tuple[int, int]:
        """What is left to publish when the stream ends after N_{last_n} (and I_{last_n - 1})."""
        end = (last_n + 1) * self.config.chunk
        if self.config.interp != (last_n >= self.since):  # N_{last_n} ran without I chunks
            return end, end
        return end - self.config.seam, end

    def order(self, n_chunks: int) -> list[ChunkPlan]:
        """The execution order from N_since on for a stream of ``n_chunks`` N chunks."""
        plans: list[ChunkPlan] = []
        for k in range(self.since, n_chunks):
            plans.append(self.n_chunk(k))
            seam = self.i_after(k)
            if seam is not None:
                plans.append(seam)
        return plans
