"""A/V offset as the outgoing tracks' senders see it."""

from __future__ import annotations

import statistics
import time
from collections import deque


class SyncProbe:
    """Measured A/V offset at release: for each track, wall time of release minus the media time
    released, median over the last ``window_s``; audio's minus video's. Playout's own figure is
    taken per audio packet against the frame on screen; this one is a windowed median as the
    tracks' senders see it. Slots playout inserts while raising its delay carry no new media time
    and are skipped.
    """

    def __init__(self, fps: int, packets_per_s: int, window_s: float = 1.0) -> None:
        self._phase = {
            "audio": deque(maxlen=max(1, round(packets_per_s * window_s))),
            "video": deque(maxlen=max(1, round(fps * window_s))),
        }

    def released(self, kind: str, media_time: float, now: float | None = None) -> None:
        self._phase[kind].append((time.monotonic() if now is None else now) - media_time)

    @property
    def offset_s(self) -> float | None:
        """Positive: audio for media time t is released after the video for t."""
        audio, video = self._phase["audio"], self._phase["video"]
        if not audio or not video:
            return None
        return statistics.median(audio) - statistics.median(video)
