"""Mouth ground truth: how open, and which shape, for every video frame of speech.

A mouth says the words, not the loudness. Where the phones are known (training speech: the
synthesiser reports them or they are aligned to the text), ``phone_track`` maps them to the
mouth (``engine.puppet.visemes``). Where only audio is there (a microphone, a file),
``MouthTracker`` reads it with a speech encoder trained on real voices and a head fitted to that
phone truth (``engine.speech``), as the audio streams in. A speech gate keeps music, noise and
tones at rest.

``MouthTracker`` takes audio in pieces of any length and works frame by frame: a frame's mouth
comes from the audio up to ``lookahead_frames`` past its end, read in blocks counted from the
stream's start, so a stream yields exactly the track of its whole audio however it is split, and
``mouth_track`` is the same tracker run over a file. What it keeps between pushes is bounded: a
window of audio and the block being used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.puppet.hearing import Resampler, SpeechGate
from engine.puppet.state import MOUTH_SHAPES
from engine.puppet.visemes import REST_OPENNESS, REST_WEIGHTS, Phone, mouth_values
from engine.speech.mouth_head import MouthHead, load_mouth_head
from engine.speech.reader import BLOCK_FRAMES, SpeechReader
from engine.speech.reader import LOOKAHEAD_FRAMES as READ_AHEAD_FRAMES

LOOKAHEAD_FRAMES = BLOCK_FRAMES + READ_AHEAD_FRAMES - 1  # a block's first frame waits for the rest of it: 200 ms
# A frame is gated by the surest speech heard from this many frames before it to its lookahead's
# end. The gate heard at the lookahead's end alone shut the mouth on a word's last syllable, as
# soon as the silence after it was heard (`avatar eval --real`, the tracker on the held-out clips:
# r 0.562 -> 0.576; chosen on the tuning clips).
GATE_BEFORE_FRAMES = 2


@dataclass(frozen=True)
class MouthTrack:
    """Per-frame mouth ground truth: ``openness`` (T,), ``weights`` (T, 4) in ``MOUTH_SHAPES`` order."""

    fps: int
    openness: np.ndarray
    weights: np.ndarray
    level_db: np.ndarray

    def __len__(self) -> int:
        return int(self.openness.shape[0])

    def weight(self, shape: str) -> np.ndarray:
        return self.weights[:, MOUTH_SHAPES.index(shape)]

    @classmethod
    def empty(cls, fps: int) -> MouthTrack:
        return cls(fps, np.zeros(0, np.float32), np.zeros((0, len(MOUTH_SHAPES)), np.float32), np.zeros(0, np.float32))

    @classmethod
    def concat(cls, parts: list[MouthTrack], fps: int) -> MouthTrack:
        """Consecutive pieces of one track (from successive pushes) as one track."""
        if not parts:
            return cls.empty(fps)
        return cls(
            fps,
            np.concatenate([p.openness for p in parts]),
            np.concatenate([p.weights for p in parts]),
            np.concatenate([p.level_db for p in parts]),
        )


def frame_count(n_samples: int, sample_rate: int, fps: int) -> int:
    """Frames needed to cover ``n_samples``; a trailing partial frame counts (zero-padded)."""
    return -(-n_samples * fps // sample_rate)


def frame_bounds(n_frames: int, sample_rate: int, fps: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample range [start, end) of frames ``first`` .. ``first + n_frames - 1``: frame n covers
    [n*sr/fps, (n+1)*sr/fps)."""
    n = np.arange(first, first + n_frames + 1, dtype=np.int64)
    edges = (n * sample_rate) // fps
    return edges[:-1], edges[1:]


@dataclass
class MouthTracker:
    """Streaming ``mouth_track``: ``push`` audio in pieces of any length, get each frame once the
    audio ``lookahead_frames`` past it is in (at least, and by default, what the speech reader's
    block and read-ahead need); ``close`` ends the stream and returns what is left (the last
    partial frame zero-padded)."""

    sample_rate: int
    fps: int = 25
    lookahead_frames: int | None = None  # None: what the reader waits for
    block_frames: int = BLOCK_FRAMES  # the speech reader's blocks ...
    read_ahead_frames: int = READ_AHEAD_FRAMES  # ... and the audio past a block's end it reads them with
    frame: int = field(default=0, init=False)  # next frame to make
    heard_frames: int = field(default=0, init=False)  # frames whose audio the reader has heard
    received: int = field(default=0, init=False)  # samples pushed so far
    closed: bool = field(default=False, init=False)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), init=False)  # from heard_frames on
    levels: list[float] = field(default_factory=list, init=False)  # dBFS of frames heard but not yet made
    # the speech gate after each frame heard, from GATE_BEFORE_FRAMES before the next frame to make
    gates: list[float] = field(default_factory=lambda: [0.0] * GATE_BEFORE_FRAMES, init=False)
    reader: SpeechReader = field(init=False)
    head: MouthHead = field(default_factory=load_mouth_head, init=False, repr=False)
    resampler: Resampler = field(init=False)
    gate: SpeechGate = field(default_factory=SpeechGate, init=False)

    def __post_init__(self) -> None:
        if self.sample_rate < 8000:
            raise ValueError(f"need at least 8 kHz audio to hear speech, got {self.sample_rate}")
        self.reader = SpeechReader(self.fps, block_frames=self.block_frames, lookahead_frames=self.read_ahead_frames)
        if self.lookahead_frames is None:
            self.lookahead_frames = self.reader.wait_frames
        if self.lookahead_frames < self.reader.wait_frames:
            raise ValueError(f"the speech reader needs {self.reader.wait_frames} frames of lookahead, "
                             f"got {self.lookahead_frames}")
        self.resampler = Resampler(self.sample_rate)

    @property
    def lookahead(self) -> int:
        return self.lookahead_samples(self.sample_rate, self.fps, self.lookahead_frames)

    @staticmethod
    def lookahead_samples(sample_rate: int, fps: int, frames: int = LOOKAHEAD_FRAMES) -> int:
        """Samples past a frame's end its mouth waits for (at most: frames are of whole samples)."""
        return -(-frames * sample_rate // fps)

    def push(self, pcm: np.ndarray) -> MouthTrack:
        """Mono float audio continuing the stream -> the frames it completes (possibly none)."""
        if self.closed:
            raise RuntimeError("the mouth tracker is closed")
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        self.pending = np.concatenate([self.pending, x])
        self.received += x.shape[0]
        return self._frames(((self.received + 1) * self.fps - 1) // self.sample_rate, self.lookahead_frames)

    def rewind(self, sample: int) -> int:
        """The audio from ``sample`` on changed (rewritten, or silenced by an interrupt): hear it
        again from the start of the frame holding it, or of the next frame to make if that is
        later (a made frame stays made). Returns the sample the next ``push`` must continue from."""
        frame = max(self.frame, sample * self.fps // self.sample_rate)
        start = frame * self.sample_rate // self.fps  # as frame_bounds has it
        if self.closed or start >= self.received:
            return self.received
        if frame >= self.heard_frames:  # within the frame being gathered: only its later samples go
            self.pending = self.pending[:start - self.heard_frames * self.sample_rate // self.fps]
        else:
            self.reader.rewind(self.resampler.rewind(start))
            self.gate.rewind()
            del self.levels[frame - self.frame:]
            del self.gates[frame - self.frame + GATE_BEFORE_FRAMES:]
            self.heard_frames = frame
            self.pending = np.zeros(0, np.float32)
        self.received = start
        return start

    def close(self) -> MouthTrack:
        """End of the audio: the remaining frames, the last one zero-padded."""
        if self.closed:
            return MouthTrack.empty(self.fps)
        self.closed = True
        end = frame_count(self.received, self.sample_rate, self.fps)
        _, ends = frame_bounds(1, self.sample_rate, self.fps, end - 1)
        self.pending = np.concatenate([self.pending, np.zeros(max(0, int(ends[0]) - self.received), np.float32)])
        return self._frames(end, 0)

    def _frames(self, complete: int, ahead: int) -> MouthTrack:
        """Hear frames up to ``complete`` (their audio lies in ``pending``) one at a time; after
        each, make every frame ``ahead`` frames behind it, so a frame's mouth never depends on how
        the audio was split."""
        parts = []
        if complete > self.heard_frames:
            starts, ends = frame_bounds(complete - self.heard_frames, self.sample_rate, self.fps, self.heard_frames)
            base = starts[0]
            for lo, hi in zip((starts - base).tolist(), (ends - base).tolist(), strict=True):
                self._hear(self.pending[lo:hi])
                if not self.closed:  # a closing stream's last frames are all heard before they are made
                    parts.append(self._make(self.heard_frames - ahead))
            self.pending = self.pending[int(ends[-1] - base):].copy()
        parts.append(self._make(self.heard_frames - ahead))
        return MouthTrack.concat(parts, self.fps)

    def _hear(self, x: np.ndarray) -> None:
        heard = self.resampler.push(x)
        self.reader.push(heard)
        self.gates.append(self.gate.push(heard))
        self.levels.append(10.0 * float(np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-10)))
        self.heard_frames += 1

    def _make(self, end: int) -> MouthTrack:
        """Frames [self.frame, end) from the audio heard so far (a closed stream's ends there)."""
        count = max(end - self.frame, 0)
        if not count:
            return MouthTrack.empty(self.fps)
        level = np.array(self.levels[:count], np.float32)
        openness, weights = self.head(self.reader.features(self.frame, count, final=self.closed))
        span = GATE_BEFORE_FRAMES + self.lookahead_frames + 1
        speech = np.array([max(self.gates[k:k + span]) for k in range(count)], np.float32)[:, None]
        openness = REST_OPENNESS + speech[:, 0] * (openness - REST_OPENNESS)
        weights = REST_WEIGHTS + speech * (weights - REST_WEIGHTS)
        del self.gates[:count]
        del self.levels[:count]
        self.frame += count
        return MouthTrack(self.fps, openness.astype(np.float32), weights.astype(np.float32), level)


def mouth_track(pcm: np.ndarray, sample_rate: int, fps: int = 25) -> MouthTrack:
    """Mouth openness and shape weights for every video frame of mono float audio, from the
    speech heard in it."""
    tracker = MouthTracker(sample_rate, fps)
    return MouthTrack.concat([tracker.push(pcm), tracker.close()], fps)


def openness_series(pcm: np.ndarray, sample_rate: int, fps: int = 25) -> np.ndarray:
    """Mouth openness per video frame heard from the audio, (T,) float32 in [0, 1]."""
    return mouth_track(pcm, sample_rate, fps).openness


def frame_levels(pcm: np.ndarray, sample_rate: int, fps: int) -> np.ndarray:
    """Frame RMS in dBFS of every video frame of the audio, the last one zero-padded."""
    starts, ends = frame_bounds(frame_count(pcm.shape[0], sample_rate, fps), sample_rate, fps)
    sq = np.concatenate([[0.0], np.cumsum(np.asarray(pcm, np.float64) ** 2)])
    total = sq[np.minimum(ends, pcm.shape[0])] - sq[np.minimum(starts, pcm.shape[0])]
    return (10.0 * np.log10(total / np.maximum(ends - starts, 1) + 1e-10)).astype(np.float32)


def phone_track(phones: list[Phone], pcm: np.ndarray, sample_rate: int, fps: int = 25) -> MouthTrack:
    """The mouth ground truth of speech whose phones are known (the training voices report or
    align them): openness and shape from the phones, loudness as emphasis only."""
    level = frame_levels(pcm, sample_rate, fps)
    openness, weights = mouth_values(phones, 0, level.shape[0], fps, level)
    return MouthTrack(fps, openness, weights, level)
