"""Audio in, face states out, as the audio arrives: the puppet's face track, streamed.

``FaceTracker`` chains the streaming mouth tracker (``engine.puppet.mouth``) and the face's
motion processes (``engine.puppet.motion``); neither keeps anything that grows with the
stream. ``face_track_from_audio`` is the same tracker run over a whole file, so a stream
gives exactly the track of its whole audio, however it is split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from engine.puppet.motion import FaceAnimator
from engine.puppet.mouth import MouthTrack, MouthTracker
from engine.puppet.state import FaceState

_GENERATOR_BYTES = 32  # a PCG64 generator's state: a 128-bit state and a 128-bit increment


@dataclass
class FaceTracker:
    """Streaming ``face_track_from_audio``: ``push`` audio, get the states of the frames it
    completes; ``close`` at the end of the audio returns the rest (the last partial frame
    zero-padded). Frame n covers samples [n*sr/fps, (n+1)*sr/fps); its state comes once
    ``lookahead`` samples past its end are in (the mouth tracker's speech reader needs them)."""

    sample_rate: int
    fps: int = 25
    seed: int = 0
    mouth: MouthTracker = field(init=False)
    motion: FaceAnimator = field(init=False)

    def __post_init__(self) -> None:
        self.mouth = MouthTracker(self.sample_rate, self.fps)
        self.motion = FaceAnimator(self.fps, self.seed)

    @property
    def lookahead(self) -> int:
        return self.mouth.lookahead

    @staticmethod
    def lookahead_samples(sample_rate: int, fps: int) -> int:
        """Samples past a frame's end the tracker waits for before it gives the frame's state."""
        return MouthTracker.lookahead_samples(sample_rate, fps)

    @property
    def closed(self) -> bool:
        return self.mouth.closed

    @property
    def frames(self) -> int:
        """Face states returned so far."""
        return self.motion.frame

    def push(self, pcm: np.ndarray) -> list[FaceState]:
        """Mono float audio continuing the stream (any length) -> states of the frames it completes."""
        return self._faces(self.mouth.push(pcm))

    def rewind(self, sample: int) -> int:
        """The audio from ``sample`` on changed; the sample to push again from (``MouthTracker.rewind``)."""
        return self.mouth.rewind(sample)

    def close(self) -> list[FaceState]:
        return self._faces(self.mouth.close())

    def nbytes(self) -> int:
        """Bytes of the numbers carried between pushes; the same at any point of a stream of
        whole-frame pushes, however long it has run."""
        return state_nbytes(self)

    def _faces(self, track: MouthTrack) -> list[FaceState]:
        return animate(self.motion, track)


def face_track_from_audio(pcm: np.ndarray, sample_rate: int, fps: int = 25, seed: int = 0) -> list[FaceState]:
    """One ``FaceState`` per video frame; frame n covers samples [n*sr/fps, (n+1)*sr/fps)."""
    tracker = FaceTracker(sample_rate, fps, seed)
    return tracker.push(pcm) + tracker.close()


def face_track_from_mouth(track: MouthTrack, seed: int = 0) -> list[FaceState]:
    """One ``FaceState`` per frame of a mouth track made beforehand (a phonetic truth)."""
    return animate(FaceAnimator(track.fps, seed), track)


def animate(motion: FaceAnimator, track: MouthTrack) -> list[FaceState]:
    """The face states of a mouth track's frames, continuing ``motion``'s stream."""
    return [motion.step(o, w) for o, w in zip(track.openness.tolist(), track.weights, strict=True)]


def state_nbytes(obj: object) -> int:
    """Bytes of the numbers a state object carries: arrays by size, scalars as 8 bytes, random
    generators by their PCG64 state; dataclasses and sequences field by field. Functions
    (an event clock's gap distribution) and models are code, not state."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, bool | int | float | np.generic):
        return 8
    if isinstance(obj, np.random.Generator):
        return _GENERATOR_BYTES
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(state_nbytes(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, list | tuple):
        return sum(state_nbytes(v) for v in obj)
    if isinstance(obj, dict):
        return sum(state_nbytes(v) for v in obj.values())
    return 0
