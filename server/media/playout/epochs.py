"""Resync epochs: where each engine frame sits on the playout timeline.

Engine frame ``index`` sits at playout slot ``index - n0 + shift`` (its audio ``shift`` frames
later too), where ``n0`` is the first frame's index and ``shift`` starts at 0. When the engine
falls so far behind that even the maximum delay cannot cover it, a *resync* starts a new epoch
with a larger ``shift`` (by whole quanta) so that the arriving frame is due L after now; the
slots in between become an inserted hold on both tracks, like a raise of L.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from server.base.engine_port import PublishedFrame
from server.media.playout.config import EPS, PlayoutConfig


@dataclass(frozen=True)
class Epoch:
    """From playout slot ``start`` on, engine frame n sits at slot ``n - n0 + shift``.

    Slots in ``[gap_start, start)`` belong to no frame: the hold a resync inserted.
    Samples likewise, in playout samples (``gap_sample``, ``start_sample``, ``shift_samples``).
    """

    gap_start: int
    start: int
    shift: int
    gap_sample: int
    start_sample: int
    shift_samples: int


class EpochTimeline:
    """The epochs so far; the last one places arriving frames."""

    def __init__(self, config: PlayoutConfig) -> None:
        self.config = config
        self._frames_per_q = int(config.quantum / config.frame_period)
        self._epochs: list[Epoch] = [Epoch(0, 0, 0, 0, 0, 0)]
        self.n0 = 0  # first frame's index
        self.s0 = 0  # first frame's sample index

    def begin(self, first: PublishedFrame) -> None:
        self.n0 = first.index
        self.s0 = first.sample_index

    @property
    def current(self) -> Epoch:
        return self._epochs[-1]

    def slot_of(self, frame: PublishedFrame) -> int:
        return frame.index - self.n0 + self.current.shift

    def sample_of(self, frame: PublishedFrame) -> int:
        return frame.sample_index - self.s0 + self.current.shift_samples

    def at_slot(self, slot: int) -> Epoch | None:
        """The epoch a playout slot belongs to; None inside a resync's hold."""
        for epoch in reversed(self._epochs):
            if slot >= epoch.start:
                return epoch
            if slot >= epoch.gap_start:
                return None
        return self._epochs[0]

    def at_samples(self, start: int, end: int) -> Epoch | None:
        """The epoch of the playout samples [start, end); None if they all lie in a resync's hold."""
        for epoch in reversed(self._epochs):
            if start >= epoch.start_sample:
                return epoch
            if start >= epoch.gap_sample:
                return epoch if end > epoch.start_sample else None
        return self._epochs[0]

    def rebase(self, frame: PublishedFrame, free_from: int, now_rel: float) -> Epoch:
        """Start an epoch that puts ``frame`` (and the engine's later frames) at slots due L from now.

        Both tracks shift by the same whole number of quanta, so each frame's audio stays with it.
        ``free_from`` is the first slot no track has passed or holds buffered: from there (rounded
        up to a quantum) to the new position is the inserted hold.
        """
        cfg = self.config
        fpq = self._frames_per_q
        lo = max(free_from, self.current.start)
        gap_start = -(lo // -fpq) * fpq
        # Slot i is due at t0 + i/fps + L: i >= now*fps puts it at least L from now.
        target = max(gap_start, math.ceil(now_rel * cfg.fps - EPS))
        shift = -((target - (frame.index - self.n0)) // -fpq) * fpq
        shift = max(shift, self.current.shift)
        shift_samples = shift * cfg.sample_rate // cfg.fps  # exact: whole quanta hold whole packets
        epoch = Epoch(
            gap_start=gap_start,
            start=frame.index - self.n0 + shift,
            shift=shift,
            gap_sample=gap_start * cfg.sample_rate // cfg.fps,
            start_sample=frame.sample_index - self.s0 + shift_samples,
            shift_samples=shift_samples,
        )
        self._epochs.append(epoch)
        return epoch
