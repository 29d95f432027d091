"""Reading generated photo frames back with the face mesh, as the photo evaluations do."""

from __future__ import annotations

import numpy as np

from engine.face.detect import FaceBox, detect_faces
from engine.face.landmarks import face_landmarks


class PhotoEvalError(ValueError):
    """The ``--image`` cannot be evaluated; ``reason`` is one line for a person."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class MeshReader:
    """Landmarks of successive frames of one photo session: the detector finds the face on each
    frame; where it misses one (a blurred or mid-blink frame) the last box is used again."""

    def __init__(self, box: FaceBox | None) -> None:
        self.box = box

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        boxes = detect_faces(frame)
        if boxes:
            self.box = max(boxes, key=lambda b: b.width * b.height)
        if self.box is None:
            raise PhotoEvalError("the face mesh finds no face on a generated frame")
        return face_landmarks(frame, self.box).landmarks
