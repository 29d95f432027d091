"""Voice activity on the user's microphone (agent mode): when the user starts and stops talking.

The model is the engine's (Silero VAD through onnxruntime, 32 ms windows at 16 kHz, ~0.3 ms
each), handed in as a :class:`~server.base.local_engine.VoiceActivity` made once per stream.

:class:`SpeechDetector` turns window probabilities into segments with hysteresis (start
above ``threshold`` for ``min_speech_ms``; stop below ``neg_threshold`` for
``min_silence_ms``) and keeps the segment's audio (plus a short pre-roll) so it can be
handed to an external speech recogniser.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from server.base.local_engine import VadUnavailable as VadUnavailable  # barge-in reports it
from server.base.local_engine import VoiceActivity
from server.media.audio import Resampler, float_to_pcm16


@dataclass(frozen=True)
class VadConfig:
    threshold: float = 0.5
    neg_threshold: float = 0.35
    min_speech_ms: int = 96  # this much speech in a row before it counts (a cough or click does not)
    min_silence_ms: int = 480  # this much silence in a row ends the segment
    pre_roll_ms: int = 192  # audio kept from before the detected onset, for a recogniser
    max_segment_s: float = 15.0  # longer speech is delivered in pieces of this length (~640 KB of base64)


@dataclass(frozen=True)
class SpeechStarted:
    start: int  # stream sample (at the detector's input rate) where speech began


@dataclass(frozen=True)
class SpeechStopped:
    start: int
    end: int  # stream sample just after the speech
    pcm: np.ndarray  # float32 mono at the input rate: [start - pre-roll, end)


class VadWindows:
    """Cuts one stream (float32 mono at ``sample_rate``) into the model's windows (``window``
    samples at ``rate``), numbered from the stream's start, and maps a window back to the input
    stream's samples."""

    def __init__(self, sample_rate: int, rate: int, window: int) -> None:
        self.sample_rate = sample_rate
        self.rate = rate
        self.window = window
        self._resampler = None if sample_rate == rate else Resampler(rate)
        self._pending = np.zeros(0, np.float32)  # 16 kHz samples not yet a whole window
        self._count = 0  # windows handed out

    def push(self, samples: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Each whole window ``samples`` completes, with its index."""
        if self._resampler is None:
            audio = samples
        else:
            audio = self._resampler.push_pcm16(float_to_pcm16(samples), self.sample_rate)
        self._pending = np.concatenate([self._pending, audio]) if self._pending.size else audio
        while self._pending.size >= self.window:
            window, self._pending = self._pending[:self.window], self._pending[self.window:]
            index = self._count
            self._count += 1
            yield index, window

    def sample(self, window: int) -> int:
        """Input-stream sample where window ``window`` begins."""
        return window * self.window * self.sample_rate // self.rate


class SegmentAudio:
    """The input audio a segment's PCM is cut from: while idle only the pre-roll and what detection
    lags behind an onset, from a (candidate) onset on everything until the segment is cut."""

    def __init__(self, pre_roll: int, hold: int) -> None:
        self._keep = pre_roll  # input samples kept from before a segment's start
        self._hold = hold  # input samples kept while idle
        self._audio: list[np.ndarray] = []
        self._start = 0  # stream sample of _audio[0][0]

    def remember(self, samples: np.ndarray, in_segment: bool) -> None:
        self._audio.append(samples.astype(np.float32, copy=False))
        if in_segment:
            return
        total = sum(a.size for a in self._audio)
        while self._audio and total - self._audio[0].size >= self._hold:
            total -= self._audio[0].size
            self._start += self._audio[0].size
            self._audio.pop(0)

    def cut(self, start: int, end: int) -> np.ndarray:
        """The segment ``[start, end)`` with its pre-roll; what follows ``end`` stays."""
        audio = np.concatenate(self._audio) if self._audio else np.zeros(0, np.float32)
        lo = max(0, start - self._keep - self._start)
        hi = max(lo, end - self._start)
        pcm = audio[lo:hi].copy()
        tail = audio[hi:]
        self._audio = [tail] if tail.size else []
        self._start = end
        return pcm


class SpeechDetector:
    """Streams one microphone's audio (float32 mono at ``sample_rate``) into speech start/stop events."""

    def __init__(self, sample_rate: int, model: VoiceActivity, config: VadConfig | None = None) -> None:
        self.sample_rate = sample_rate
        self.config = cfg = config or VadConfig()
        self._vad = model
        self._windows = VadWindows(sample_rate, model.rate, model.window)
        ms = model.window * 1000 / model.rate
        self._need_speech = max(1, round(cfg.min_speech_ms / ms))
        self._need_silence = max(1, round(cfg.min_silence_ms / ms))
        self._run = 0  # windows in a row on the other side of the hysteresis
        self._onset: int | None = None  # first window of a candidate/confirmed segment
        self.speaking = False
        self.received = 0  # input samples pushed so far
        pre_roll = int(cfg.pre_roll_ms * sample_rate / 1000)
        # While idle, keep the pre-roll plus what detection lags behind the onset (the confirming windows).
        self._audio = SegmentAudio(pre_roll, pre_roll + self._windows.sample(self._need_speech + 2))
        self.probability = 0.0

    def push(self, samples: np.ndarray) -> list[SpeechStarted | SpeechStopped]:
        events: list[SpeechStarted | SpeechStopped] = []
        self._audio.remember(samples, in_segment=self.speaking or self._onset is not None)
        self.received += samples.size
        for index, window in self._windows.push(samples):
            self.probability = p = self._vad(window)
            events.extend(self._step(index, p))
        return events

    def _step(self, index: int, p: float) -> list[SpeechStarted | SpeechStopped]:
        cfg, sample = self.config, self._windows.sample
        if not self.speaking:
            if p >= cfg.threshold:
                if self._run == 0:
                    self._onset = index
                self._run += 1
                if self._run >= self._need_speech:
                    self.speaking, self._run = True, 0
                    return [SpeechStarted(sample(self._onset or index))]
            else:
                self._run, self._onset = 0, None
            return []
        start = sample(self._onset or 0)
        if sample(index + 1) - start >= cfg.max_segment_s * self.sample_rate:
            stop = self._stop(start, sample(index + 1))
            self.speaking, self._onset = True, index + 1
            return [stop, SpeechStarted(sample(index + 1))]
        if p < cfg.neg_threshold:
            self._run += 1
            if self._run >= self._need_silence:
                end = sample(index + 1 - self._run)
                self.speaking, self._run, self._onset = False, 0, None
                return [self._stop(start, end)]
        else:
            self._run = 0
        return []

    def _stop(self, start: int, end: int) -> SpeechStopped:
        return SpeechStopped(start, end, self._audio.cut(start, end))
