"""A square crop around a face, inside the photo, with the landmarks in crop pixels.

The preferred framing is head and shoulders: the face oval at 45% of the side, the eyes at
40% of its height. A photo tighter than that (a selfie, a webcam frame, a frame of talking-head
footage) gets the largest square the photo holds, shifted to keep the face in it: the face is
then larger in the frame. Every pixel of the crop is the photo's own, resampled; nothing is
padded or replicated. A photo too tight for even that (the eyes, brows or mouth at its edge)
is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.checks import FaceError
from engine.face.landmarks import (
    FACE_OVAL,
    LEFT_BROW,
    LIPS_OUTER_LOWER,
    MOUTH_CORNERS,
    RIGHT_BROW,
    Face,
)

FACE_FRACTION = 0.45  # the face oval's larger side over the crop side, where the photo allows
EYE_HEIGHT = 0.40  # eye line, as a fraction of the crop height from the top
MIN_SIZE = 384
# What must lie inside the crop, this far (a fraction of its side) from its edges: the brows, the
# eyes, the lips, and room below the lips for the jaw to drop (``JAW_ROOM`` mouth widths).
EDGE_MARGIN = 0.02
JAW_ROOM = 0.35


@dataclass(frozen=True)
class CropBox:
    """An axis-aligned square of a source image: top-left (x0, y0) and side, in source pixels."""

    x0: int
    y0: int
    side: int

    def to_crop(self, points: np.ndarray, size: int) -> np.ndarray:
        """Source pixel coordinates (..., >=2) -> crop coordinates (x, y and z scaled alike)."""
        s = size / self.side
        out = np.array(points, dtype=np.float32, copy=True)
        out[..., 0] = (out[..., 0] - self.x0 + 0.5) * s - 0.5
        out[..., 1] = (out[..., 1] - self.y0 + 0.5) * s - 0.5
        if out.shape[-1] > 2:
            out[..., 2:] *= s
        return out

    def to_source(self, points: np.ndarray, size: int) -> np.ndarray:
        """Crop coordinates (..., 2) -> source pixel coordinates (the inverse of ``to_crop``'s x, y)."""
        s = self.side / size
        out = np.array(points, dtype=np.float64, copy=True)
        out[..., 0] = (out[..., 0] + 0.5) * s - 0.5 + self.x0
        out[..., 1] = (out[..., 1] + 0.5) * s - 0.5 + self.y0
        return out

    def inside(self, shape: tuple[int, ...]) -> bool:
        """Whether the square lies within a photo of ``shape`` (h, w, ...)."""
        return self.x0 >= 0 and self.y0 >= 0 and self.x0 + self.side <= shape[1] and self.y0 + self.side <= shape[0]


def preferred_side(face: Face) -> float:
    """The head-and-shoulders square's side for ``face``, in its photo's pixels."""
    oval = face.points(FACE_OVAL)
    return float(max(oval.max(0) - oval.min(0))) / FACE_FRACTION


def crop_box(face: Face, shape: tuple[int, ...], side: float | None = None) -> CropBox:
    """The square for ``face`` inside a photo of ``shape`` (h, w, ...): head and shoulders where the
    photo allows, else the largest square it holds, the face kept as central as the photo lets it.
    ``side`` asks for another preferred side (enrolment frames the whole clip's motion)."""
    h, w = int(shape[0]), int(shape[1])
    want = preferred_side(face) if side is None else side
    s = max(min(int(round(want)), w, h), 8)
    oval = face.points(FACE_OVAL)
    eyes = (face.right_eye_center + face.left_eye_center) / 2
    cx = (oval[:, 0].min() + oval[:, 0].max()) / 2
    x0 = int(round(cx - s / 2))
    y0 = int(round(eyes[1] - EYE_HEIGHT * s))
    return CropBox(min(max(x0, 0), w - s), min(max(y0, 0), h - s), s)


def check_framing(face: Face, box: CropBox) -> None:
    """``FaceError`` when the square cuts through what the rig moves: the brows, eyes and lips, and
    the room the jaw drops into, must lie inside it with a small margin."""
    mw = face.mouth_width
    keep = np.concatenate([face.points(RIGHT_BROW + LEFT_BROW), face.points(MOUTH_CORNERS),
                           face.points(LIPS_OUTER_LOWER) + [0.0, JAW_ROOM * mw]])
    margin = EDGE_MARGIN * box.side
    lo = np.array([box.x0, box.y0], np.float64) + margin
    hi = lo + box.side - 2 * margin
    out = (keep < lo) | (keep > hi)
    if not out.any():
        return
    sides = []
    if out[:, 1].any():
        top = (keep[:, 1] < lo[1]).any()
        sides.append("the brows touch the top edge" if top else "the mouth and chin touch the bottom edge")
    if out[:, 0].any():
        sides.append("the face touches a side edge")
    raise FaceError(f"the photo is cropped too tightly ({' and '.join(sides)}): a photo showing the whole face "
                    "from above the brows to below the chin is needed")


def crop_face(image: np.ndarray, face: Face, size: int = 512, box: CropBox | None = None) -> tuple[np.ndarray, Face]:
    """The (size, size, 3) crop around ``face`` (``crop_box``, or ``box``) and the face in crop
    coordinates; ``FaceError`` when the photo is too tight to frame the face (``check_framing``)."""
    if size < MIN_SIZE:
        raise ValueError(f"crop size {size} is below the minimum {MIN_SIZE}")
    box = crop_box(face, image.shape) if box is None else box
    if not box.inside(image.shape):
        raise ValueError(f"{box} is not inside the photo {image.shape[:2]}")
    check_framing(face, box)
    square = image[box.y0 : box.y0 + box.side, box.x0 : box.x0 + box.side]
    interp = cv2.INTER_AREA if box.side > size else cv2.INTER_CUBIC
    out = cv2.resize(square, (size, size), interpolation=interp)
    lm = box.to_crop(face.landmarks, size)
    return np.ascontiguousarray(out), Face(lm, None, face.presence)
