"""The history window an N chunk is conditioned on, as the rolling state keeps it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from engine.modules.dit import KVBlock


@dataclass(frozen=True)
class HistoryWindow:
    """The newest ``window`` N-chunk latents of each row: their K/V, and the context-noised
    latents and audio tokens those K/V were computed from.

    The K/V of the whole window are recomputed in one pass after every N chunk, as training
    builds them. A window assembled from the passes of short chunks, each seeing only its own
    frames, is not what the model learned: at one latent a chunk the face drifts from its
    reference within seconds. Passes that see the window before them do not drift; with the
    config's ``append_history`` a chunk shorter than the window appends its frames' K/V so made.
    """

    kv: KVBlock  # B rows
    latents: torch.Tensor  # (B, n, c, h, w) at the context noise level
    audio: torch.Tensor  # (B, n, A, Da) their audio tokens

    def frames(self) -> list[int]:
        return self.kv.frames()

    def nbytes(self) -> int:
        return self.kv.nbytes() + sum(t.numel() * t.element_size() for t in (self.latents, self.audio))

    def shifted(self, delta: int) -> HistoryWindow:
        """The same window moved ``delta`` latents along the timeline."""
        return self if delta == 0 else replace(self, kv=self.kv.shifted(delta))

    @staticmethod
    def stack(windows: Sequence[HistoryWindow]) -> HistoryWindow:
        if len(windows) == 1:
            return windows[0]
        return HistoryWindow(KVBlock.stack([w.kv for w in windows]), torch.cat([w.latents for w in windows]),
                             torch.cat([w.audio for w in windows]))

    def split(self) -> list[HistoryWindow]:
        """One window per row, each a copy of its own (so no row keeps the batch alive)."""
        if self.latents.shape[0] == 1:
            return [self]
        return [HistoryWindow(kv, lat.clone(), aud.clone()) for kv, lat, aud in
                zip(self.kv.split(), self.latents.split(1), self.audio.split(1), strict=True)]
