"""PCM conversions and resampling to the engine's rate.

One ``av.AudioResampler`` per input stream: libswresample keeps filter state between
frames, and feeding it a different input format mid-stream is an error, so a stream whose
rate changes gets a fresh resampler.
"""

from __future__ import annotations

from collections import deque

import av
import numpy as np


def pcm16_to_float(pcm: bytes | np.ndarray) -> np.ndarray:
    """Little-endian PCM16 (bytes or int16 array) to float32 in [-1, 1)."""
    samples = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes | bytearray | memoryview) else pcm
    return samples.astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> np.ndarray:
    return (np.clip(samples, -1.0, 32767 / 32768) * 32768.0).astype(np.int16)


class Resampler:
    """Streams audio of one input rate/layout to float32 mono at ``out_rate``."""

    def __init__(self, out_rate: int) -> None:
        self.out_rate = out_rate
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=out_rate)
        self._key: tuple[str, str, int] | None = None

    def push_frame(self, frame: av.AudioFrame) -> np.ndarray:
        """Resample one decoded frame (e.g. aiortc's s16 stereo 48 kHz Opus output)."""
        key = (frame.format.name, frame.layout.name, frame.sample_rate)
        if self._key is None:
            self._key = key
        elif key != self._key:
            raise ValueError(f"input format changed mid-stream: {self._key} -> {key}")
        frame.pts = None
        return self._collect(self._resampler.resample(frame))

    def push_pcm16(self, pcm: bytes | np.ndarray, sample_rate: int) -> np.ndarray:
        samples = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes | bytearray) else pcm
        if samples.size == 0:
            return np.zeros(0, np.float32)
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = sample_rate
        return self.push_frame(frame)

    def flush(self) -> np.ndarray:
        return self._collect(self._resampler.resample(None))

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, np.float32)
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32, copy=False)


def resample_pcm16(pcm: bytes | np.ndarray, sample_rate: int, out_rate: int) -> np.ndarray:
    """One-shot: a whole clip (e.g. a TTS wav) to float32 mono at ``out_rate``."""
    if sample_rate == out_rate:
        return pcm16_to_float(pcm)
    resampler = Resampler(out_rate)
    head = resampler.push_pcm16(pcm, sample_rate)
    return np.concatenate([head, resampler.flush()])


def take_samples(chunks: deque[np.ndarray], n: int) -> np.ndarray:
    """Pop up to ``n`` samples from the front of a queue of sample arrays (splitting the head)."""
    parts: list[np.ndarray] = []
    need = n
    while need > 0 and chunks:
        head = chunks[0]
        if head.size <= need:
            parts.append(chunks.popleft())
            need -= head.size
        else:
            parts.append(head[:need])
            chunks[0] = head[need:]
            need = 0
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
