"""The inbound microphone: the browser's track read, resampled once to the engine's rate, counted,
and held for the feed clock in a bounded FIFO."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from server.base.metrics import ServerMetrics
from server.media.audio import Resampler, take_samples


async def consume_microphone(track: MediaStreamTrack, sample_rate: int, sink: Callable[[np.ndarray], None]) -> None:
    """Read the inbound track until it ends, resampled once to the engine's rate.

    Always reading (even when the mode ignores the mic) keeps aiortc's receive queue empty.
    """
    resampler = Resampler(sample_rate)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if isinstance(frame, av.AudioFrame):
            sink(resampler.push_frame(frame))


class MicrophoneIntake:
    """Everything the browser's microphone sends: counted (proof it carries signal), then passed on."""

    def __init__(self, sample_rate: int, metrics: ServerMetrics, sink: Callable[[np.ndarray], None]) -> None:
        self.sample_rate = sample_rate
        self.samples = 0
        self.peak = 0.0  # loudest inbound sample so far
        self._metrics = metrics
        self._sink = sink

    async def consume(self, track: MediaStreamTrack) -> None:
        await consume_microphone(track, self.sample_rate, self._on_samples)

    def _on_samples(self, samples: np.ndarray) -> None:
        self.samples += samples.size
        if samples.size:
            self.peak = max(self.peak, float(np.abs(samples).max()))
        self._metrics.media.mic_seconds.inc(samples.size / self.sample_rate)
        self._sink(samples)


class SampleFifo:
    """Bounded FIFO of float32 samples; overflow drops the oldest (a stalled reader never grows it)."""

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self._chunks: deque[np.ndarray] = deque()
        self._size = 0
        self.dropped = 0

    def __len__(self) -> int:
        return self._size

    def push(self, samples: np.ndarray) -> None:
        if samples.size == 0:
            return
        self._chunks.append(samples)
        self._size += samples.size
        while self._size > self.max_samples:
            excess = self._size - self.max_samples
            head = self._chunks[0]
            if head.size <= excess:
                self._chunks.popleft()
                self._size -= head.size
                self.dropped += head.size
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess
                self.dropped += excess

    def take(self, n: int) -> np.ndarray:
        out = take_samples(self._chunks, n)
        self._size -= out.size
        return out

    def drop_quiet(self, n: int, level: float) -> int:
        """Drop the oldest ``n`` samples if none of them reaches ``level`` (not counted as overflow);
        how many were dropped."""
        head = take_samples(self._chunks, n)
        if head.size and float(np.abs(head).max()) < level:
            self._size -= head.size
            return head.size
        if head.size:
            self._chunks.appendleft(head)
        return 0

    def clear(self) -> None:
        self._chunks.clear()
        self._size = 0
