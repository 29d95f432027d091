"""What the mouth tracker needs around the speech reader: a speech gate that keeps music, noise
and tones at rest, and a streaming resampler to the reader's 16 kHz."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.puppet.smoother import Smoother

SAMPLE_RATE = 16000  # the speech reader's and the VAD's rate
VAD_WINDOW = 512  # Silero VAD's window at 16 kHz
GATE_LOW, GATE_HIGH = 0.15, 0.5  # speech probability mapped to a closed (0) .. open (1) gate
GATE_RISE, GATE_FALL = 0.7, 0.25  # per window: opens at once, closes over a few windows


@dataclass
class SpeechGate:
    """How surely the audio is speech, per 32 ms window (Silero VAD), smoothed: music, noise and
    tones, which a speech encoder still hears something in, keep the mouth at rest."""

    vad: Any = field(default=None, init=False, repr=False)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), init=False)
    level: Smoother = field(default_factory=lambda: Smoother(GATE_RISE, GATE_FALL), init=False)

    def __post_init__(self) -> None:
        from engine.media.vad import SileroVAD

        self.vad = SileroVAD()

    def push(self, pcm: np.ndarray) -> float:
        """16 kHz audio continuing the stream -> the gate after it, 0 (not speech) .. 1 (speech)."""
        self.pending = np.concatenate([self.pending, np.asarray(pcm, np.float32)])
        while self.pending.size >= VAD_WINDOW:
            prob = self.vad(self.pending[:VAD_WINDOW])
            self.pending = self.pending[VAD_WINDOW:]
            self.level.step(min(max((prob - GATE_LOW) / (GATE_HIGH - GATE_LOW), 0.0), 1.0))
        return self.level.y

    def rewind(self) -> None:
        """The audio from the next window on is not what was heard: the samples short of a
        window are dropped (the smoothed level stays, and falls or rises from there)."""
        self.pending = np.zeros(0, np.float32)


@dataclass
class Resampler:
    """Linear resampling of a stream to ``SAMPLE_RATE``: keeps the last input sample and the
    position of the next output sample, so pieces of any length give the whole stream's output."""

    rate: int
    taken: int = field(default=0, init=False)  # input samples consumed
    made: int = field(default=0, init=False)  # output samples made
    last: float = field(default=0.0, init=False)

    def push(self, pcm: np.ndarray) -> np.ndarray:
        x = np.asarray(pcm, np.float64).reshape(-1)
        if self.rate == SAMPLE_RATE or not x.size:
            self.taken += x.size
            return x.astype(np.float32)
        total = self.taken + x.size
        # output sample k sits at input position k * rate / SAMPLE_RATE; make those before the last input sample
        end = ((total - 1) * SAMPLE_RATE) // self.rate + 1
        pos = np.arange(self.made, end) * (self.rate / SAMPLE_RATE) - (self.taken - 1)
        ext = np.concatenate([[self.last], x])
        out = np.interp(pos, np.arange(ext.size), ext)
        self.taken, self.made, self.last = total, max(end, self.made), float(x[-1])
        return out.astype(np.float32)

    def rewind(self, taken: int) -> int:
        """Continue as if only ``taken`` input samples had come (the last of them taken as silence);
        returns the output samples made of them."""
        self.taken, self.last = taken, 0.0
        if self.rate == SAMPLE_RATE or not taken:
            self.made = taken
        else:  # output k lies at input k * rate / SAMPLE_RATE: those up to the last input are made
            self.made = ((taken - 1) * SAMPLE_RATE) // self.rate + 1
        return self.made
