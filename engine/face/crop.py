"""A square head-and-shoulders crop around a face, with the landmarks in crop pixels."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.landmarks import FACE_OVAL, Face

FACE_FRACTION = 0.45  # the face oval's larger side over the crop side
EYE_HEIGHT = 0.40  # eye line, as a fraction of the crop height from the top
MIN_SIZE = 384


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


def crop_box(face: Face) -> CropBox:
    """The head-and-shoulders square for a face: oval ~45% of the side, eyes at 40% height."""
    oval = face.points(FACE_OVAL)
    extent = oval.max(0) - oval.min(0)
    side = int(round(max(extent) / FACE_FRACTION))
    eyes = (face.right_eye_center + face.left_eye_center) / 2
    cx = (oval[:, 0].min() + oval[:, 0].max()) / 2
    return CropBox(int(round(cx - side / 2)), int(round(eyes[1] - EYE_HEIGHT * side)), max(side, 8))


def crop_face(image: np.ndarray, face: Face, size: int = 512) -> tuple[np.ndarray, Face]:
    """The (size, size, 3) crop around ``face`` and the face in crop coordinates.

    Parts of the square outside the photo are filled by replicating its edge pixels.
    """
    if size < MIN_SIZE:
        raise ValueError(f"crop size {size} is below the minimum {MIN_SIZE}")
    box = crop_box(face)
    h, w = image.shape[:2]
    pad_l, pad_t = max(0, -box.x0), max(0, -box.y0)
    pad_r, pad_b = max(0, box.x0 + box.side - w), max(0, box.y0 + box.side - h)
    src = image
    if pad_l or pad_t or pad_r or pad_b:
        src = cv2.copyMakeBorder(image, pad_t, pad_b, pad_l, pad_r, cv2.BORDER_REPLICATE)
    y0, x0 = box.y0 + pad_t, box.x0 + pad_l
    square = src[y0 : y0 + box.side, x0 : x0 + box.side]
    interp = cv2.INTER_AREA if box.side > size else cv2.INTER_CUBIC
    out = cv2.resize(square, (size, size), interpolation=interp)
    lm = box.to_crop(face.landmarks, size)
    return np.ascontiguousarray(out), Face(lm, None, face.presence)
