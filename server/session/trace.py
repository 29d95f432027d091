"""The latency trace: when each stage between the voice and the face handled what, over the last
half minute, so one mouth-to-screen latency splits into measured terms.

Four clock-stamped logs (``time.monotonic()``, the clock every process on the machine shares):
microphone blocks as they arrived, feed blocks as they went to the engine (their timeline
samples), engine frames as they reached the server, and video slots as they left for the
track. ``bench/latency.py`` reads them from ``GET /v1/sessions/{id}/trace``; each log is
bounded, so a session of any length holds the same few hundred kilobytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from server.base.engine_port import PublishedFrame
from server.media.playout import VideoOut

KEEP = 1500  # entries per log: 30 s of 20 ms blocks, 60 s of frames at 25 fps


def peak(samples: np.ndarray) -> float:
    """Peak magnitude of float samples in [-1, 1] or int16 (scaled to [0, 1])."""
    if not samples.size:
        return 0.0
    value = float(np.abs(samples).max())
    return value / 32768.0 if samples.dtype == np.int16 else value


class LatencyTrace:
    def __init__(self, keep: int = KEEP) -> None:
        self.mic: deque[tuple[float, int, float]] = deque(maxlen=keep)  # (t, samples, peak)
        self.fed: deque[tuple[float, int, int, float]] = deque(maxlen=keep)  # (t, first sample, samples, peak)
        self.generated: deque[tuple[float, int, float]] = deque(maxlen=keep)  # (t, frame index, audio peak)
        self.shown: deque[tuple[float, int, int | None]] = deque(maxlen=keep)  # (t, slot, frame index)

    def heard(self, t: float, samples: np.ndarray) -> None:
        self.mic.append((t, int(samples.size), peak(samples)))

    def fed_block(self, t: float, start: int, samples: np.ndarray) -> None:
        self.fed.append((t, start, int(samples.size), peak(samples)))

    def arrived(self, t: float, frames: Sequence[PublishedFrame]) -> None:
        for f in frames:
            self.generated.append((t, f.index, peak(f.audio)))

    def released(self, t: float, out: VideoOut) -> None:
        self.shown.append((t, out.slot, out.frame_index))

    def to_json(self) -> dict[str, list]:
        return {"mic": list(self.mic), "fed": list(self.fed), "generated": list(self.generated),
                "shown": list(self.shown)}
