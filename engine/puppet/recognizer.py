"""Phones heard in streaming audio, with CMU Sphinx's phone decoder (the ``pocketsphinx``
wheel's en-us acoustic model and phone language model, trained on real voices).

Audio is decoded as it arrives; at any moment ``phones`` is the best phone sequence for
everything heard so far, its last phone still growing. The decoder's search grows with its
utterance, so the recogniser ends the utterance and starts another every few seconds, at a
pause where it can: what it keeps is the decoder and the phones still within a mouth's reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.puppet.smoother import Smoother
from engine.puppet.visemes import Phone

SAMPLE_RATE = 16000  # the acoustic model's rate
_FRAME = 0.01  # the decoder's frame: 10 ms
RESTART_SECONDS = 6.0  # an utterance this long ends at the next pause ...
FORCE_SECONDS = 12.0  # ... or here, pause or not
KEEP_SECONDS = 1.0  # phones of ended utterances kept this long: more than any phone's reach
VAD_WINDOW = 512  # Silero VAD's window at 16 kHz
GATE_LOW, GATE_HIGH = 0.15, 0.5  # speech probability mapped to a closed (0) .. open (1) gate
GATE_RISE, GATE_FALL = 0.7, 0.25  # per window: opens at once, closes over a few windows
# Weight of the phone language model against the acoustics. Sphinx's default (6.5) suits word
# decoding; phones heard with 1.0 follow real mouths better (held-out real clips, 80 ms lookahead:
# r 0.34 -> 0.38).
LANGUAGE_WEIGHT = 1.0


def _decoder() -> Any:
    import pocketsphinx

    return pocketsphinx.Decoder(samprate=SAMPLE_RATE, allphone=pocketsphinx.get_model_path("en-us/en-us-phone.lm.bin"),
                                lm=None, lw=LANGUAGE_WEIGHT, loglevel="FATAL", backtrace=False)


@dataclass
class PhoneRecognizer:
    """Streaming phone recognition of 16 kHz mono float audio."""

    heard: int = field(default=0, init=False)  # samples decoded
    start: int = field(default=0, init=False)  # the current utterance's first sample
    earlier: list[Phone] = field(default_factory=list, init=False)  # of ended utterances, recent ones
    decoder: Any = field(default_factory=_decoder, init=False, repr=False)

    def __post_init__(self) -> None:
        self.decoder.start_utt()

    def push(self, pcm: np.ndarray) -> None:
        raw = (np.clip(np.asarray(pcm, np.float32), -1.0, 1.0) * 32767.0).astype(np.int16)
        if raw.size:
            self.decoder.process_raw(raw.tobytes(), no_search=False, full_utt=False)
            self.heard += raw.size
        seconds = (self.heard - self.start) / SAMPLE_RATE
        if seconds >= FORCE_SECONDS or (seconds >= RESTART_SECONDS and self._pausing()):
            self._restart()

    def phones(self) -> list[Phone]:
        """The best phone sequence so far (ARPAbet; ``SIL`` and fillers for pauses and noise)."""
        return self.earlier + self._current()

    def _current(self) -> list[Phone]:
        offset = self.start / SAMPLE_RATE
        return [Phone(s.word, offset + s.start_frame * _FRAME, offset + (s.end_frame + 1) * _FRAME)
                for s in self.decoder.seg() or ()]

    def _pausing(self) -> bool:
        current = self._current()
        return bool(current) and current[-1].name.startswith(("SIL", "+")) and current[-1].end - current[-1].start > 0.1

    def rewind(self, sample: int) -> None:
        """Forget what was heard from ``sample`` on (the audio there changed): the utterance ends,
        its phones cut at ``sample``, and decoding starts again there."""
        if sample < self.heard:
            self._restart(sample)

    def _restart(self, at: int | None = None) -> None:
        self.decoder.end_utt()
        self.heard = self.heard if at is None else at
        now = self.heard / SAMPLE_RATE
        self.earlier = [Phone(p.name, p.start, min(p.end, now)) for p in self.earlier + self._current()
                        if now - KEEP_SECONDS < p.end and p.start < now]
        self.start = self.heard
        self.decoder.start_utt()


@dataclass
class SpeechGate:
    """How surely the audio is speech, per 32 ms window (Silero VAD), smoothed: music, noise and
    tones that the phone decoder would still spell out as phones keep the mouth at rest."""

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
