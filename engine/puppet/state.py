"""Per-frame animation parameters of the puppet: what the mouth, eyes and head do."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import numpy as np

MOUTH_SHAPES: tuple[str, ...] = ("closed", "open", "rounded", "wide")
# The lips part through the "open" shape weight as openness rises to this: below it the rest of
# the weight stays "closed" (the mouth ground truth and the rig rebuild weights the same way).
SHAPE_ONSET = 0.25


@dataclass(frozen=True)
class FaceState:
    """One video frame's face parameters.

    ``openness`` alone sets how far the lips part (it is the lip-sync ground truth);
    the four shape weights (summing to ~1) only change the opening's proportions:
    ``rounded`` = small round "oo", ``wide`` = wide flat "ee", ``closed`` = lips pressed.
    Angles are radians (small, |a| < ~0.35); ``tx``/``ty`` are fractions of the image size.
    """

    openness: float = 0.0
    closed: float = 1.0
    open: float = 0.0
    rounded: float = 0.0
    wide: float = 0.0
    blink: float = 0.0
    yaw: float = 0.0
    pitch: float = 0.0
    roll: float = 0.0
    tx: float = 0.0
    ty: float = 0.0
    brow: float = 0.0  # eyebrow raise, -1 frown .. 1 raised
    gaze_x: float = 0.0  # -1 .. 1, image left .. right
    gaze_y: float = 0.0  # -1 .. 1, up .. down

    def shape_weights(self) -> np.ndarray:
        """(closed, open, rounded, wide) as a float32 vector, the order of ``MOUTH_SHAPES``."""
        return np.array([self.closed, self.open, self.rounded, self.wide], dtype=np.float32)

    def to_array(self) -> np.ndarray:
        """All fields in declaration order, for training labels and conditioning."""
        return np.array(astuple(self), dtype=np.float32)

    @classmethod
    def from_array(cls, values: np.ndarray) -> FaceState:
        return cls(*(float(v) for v in np.asarray(values).reshape(-1)[: len(FACE_STATE_FIELDS)]))


FACE_STATE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(FaceState))
NEUTRAL = FaceState()


def stack_states(states: list[FaceState]) -> np.ndarray:
    """(T, len(FACE_STATE_FIELDS)) float32 array of a whole track."""
    if not states:
        return np.zeros((0, len(FACE_STATE_FIELDS)), dtype=np.float32)
    return np.stack([s.to_array() for s in states])
