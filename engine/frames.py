"""What the engine hands to its consumers: one video frame with the audio that drove it,
and the two ways of taking a session's frames (all at once, or as they become final)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class PublishedFrame:
    """A finished video frame on the session's media timeline.

    ``index`` is the global video frame number; ``pts`` (seconds) is derived from the
    audio sample index that drives the frame, never from wall time. ``audio`` holds the
    mono float32 samples (engine sample rate) covering exactly this frame's time span,
    so audio and video share one timeline end to end.
    """

    index: int
    fps: int
    rgb: np.ndarray  # (H, W, 3) uint8
    audio: np.ndarray  # (sample_rate // fps,) float32 in [-1, 1]
    sample_rate: int
    chunk: str  # which chunk produced it, e.g. "N3" or "I2"

    @property
    def pts(self) -> Fraction:
        return Fraction(self.index, self.fps)

    @property
    def sample_index(self) -> int:
        return self.index * self.sample_rate // self.fps


class FrameSource(Protocol):
    """A streaming session as its consumers drive it (``engine.pipeline.StreamSession``,
    ``engine.puppet.engine.PuppetSession``)."""

    finished: bool

    def ready(self) -> bool: ...

    def step(self) -> list[PublishedFrame]: ...


def drain(session: FrameSource) -> Iterator[PublishedFrame]:
    """Every remaining frame of a session whose input is closed, as each step finishes them."""
    while not session.finished:
        yield from session.step()


async def stream_frames(session: FrameSource) -> AsyncIterator[PublishedFrame]:
    """Async streaming: yields frames as steps finish; compute runs in a worker thread."""
    while not session.finished:
        if not session.ready():
            await asyncio.sleep(0.005)
            continue
        for frame in await asyncio.to_thread(session.step):
            yield frame
