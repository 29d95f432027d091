"""A/V offset at release, as playout itself sees it.

Each heard audio packet is paired with the video slot on screen at its due time, from the
instants both were actually released (so a late consumer shows): audio's release minus its
media time, minus video's release minus its media time.
"""

from __future__ import annotations

import math
from collections import deque


class AvOffsetMeter:
    """Recent video releases, and heard packets waiting for their video slot to be released."""

    def __init__(self, fps: int, audio_tolerance_s: float) -> None:
        keep = max(8, math.ceil(audio_tolerance_s * fps) + 4)  # video slots audio may lag behind
        self._videos: deque[tuple[int, float, float | None]] = deque(maxlen=keep)  # (slot, released, shown)
        self._pending: deque[tuple[int, float, float]] = deque(maxlen=32)  # (slot, released, media)
        self.offset = 0.0  # seconds by which audio for media time t is released after the video for t

    def video_released(self, slot: int, shown: float | None, released: float) -> None:
        """Video slot ``slot`` went out at ``released`` showing media time ``shown`` (None: a hold)."""
        self._videos.append((slot, released, shown))
        pending = self._pending
        while pending and pending[0][0] <= slot:
            a_slot, released_a, media_a = pending.popleft()
            if a_slot == slot and shown is not None:
                self.offset = (released_a - media_a) - (released - shown)

    def audio_released(self, slot: int, media: float, released: float, video_next: int | None) -> None:
        """A packet of media time ``media`` went out at ``released``; its due time lies in video ``slot``."""
        for v_slot, released_v, shown in reversed(self._videos):
            if v_slot == slot:
                if shown is not None:
                    self.offset = (released - media) - (released_v - shown)
                return
            if v_slot < slot:
                break
        if video_next is None or slot >= video_next:
            self._pending.append((slot, released, media))
