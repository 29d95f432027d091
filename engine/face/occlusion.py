"""Is the mouth in view? A photo whose mouth is covered (a hand, a microphone, a mask) cannot
talk: the face mesh still places lips under the cover, and the rig would paint a mouth onto it.

Two cues, read where the mesh puts the lips: detail (the lips' edges and the line between them
give the mouth more gradient than the face's average; a cover is smooth there) and lip colour
(lips are darker or redder than the cheeks' skin; a cover is the colour of what covers).
A mouth counts as covered only when both are missing, so a grey photo (no colour) or one of a
smooth-lipped face (little detail) is still animated.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.landmarks import (
    CHEEKBONES,
    FACE_OVAL,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    LIPS_OUTER_LOWER,
    LIPS_OUTER_UPPER,
    Face,
)

# Measured on the astronaut and its variants (glasses, a beard, grey, hard light, tilt, scale):
# detail 0.90-1.64 and lip contrast 12.9-31.9 with the mouth in view; a hand over it 0.01 and 5.7.
MIN_MOUTH_DETAIL = 0.35
MIN_LIP_CONTRAST = 10.0


@dataclass(frozen=True)
class MouthVisibility:
    """``detail``: mean gradient over the lips (slightly dilated) over the face's mean gradient;
    ``lip_contrast``: CIELAB distance between the lips' mean colour and the cheeks'."""

    detail: float
    lip_contrast: float

    @property
    def covered(self) -> bool:
        return self.detail < MIN_MOUTH_DETAIL and self.lip_contrast < MIN_LIP_CONTRAST


def _mask(shape: tuple[int, int], polygon: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1)
    return mask


def _lips(face: Face, upper: tuple[int, ...], lower: tuple[int, ...]) -> np.ndarray:
    return np.vstack([face.points(upper), face.points(lower)[::-1]])


def mouth_visibility(image: np.ndarray, face: Face) -> MouthVisibility:
    """Both cues for ``face`` in the (H, W, 3) RGB uint8 ``image`` its landmarks are in (read in
    a crop around the face, so a large photo costs what its face does)."""
    io = face.interocular
    (x0, y0), (x1, y1) = face.points(FACE_OVAL).min(0) - 0.2 * io, face.points(FACE_OVAL).max(0) + 0.2 * io
    x0, y0 = max(int(x0), 0), max(int(y0), 0)
    image = image[y0 : max(int(y1) + 1, y0 + 1), x0 : max(int(x1) + 1, x0 + 1)]
    face = face.translated(-x0, -y0)
    shape = image.shape[:2]
    grey = cv2.GaussianBlur(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32), (0, 0), max(0.5, 0.01 * io))
    gradient = np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    outer = _mask(shape, _lips(face, LIPS_OUTER_UPPER, LIPS_OUTER_LOWER))
    around = cv2.dilate(outer, np.ones((3, 3), np.uint8), iterations=max(1, round(0.05 * io))) > 0
    oval = _mask(shape, face.points(FACE_OVAL)) > 0
    detail = float(gradient[around].mean() / max(float(gradient[oval].mean()), 1e-3))

    lab = cv2.cvtColor(image, cv2.COLOR_RGB2LAB).astype(np.float32)
    band = (outer > 0) & (_mask(shape, _lips(face, LIPS_INNER_UPPER, LIPS_INNER_LOWER)) == 0)
    skin = np.zeros(shape, bool)
    r = max(2, round(0.08 * io))
    for x, y in np.round(face.points(CHEEKBONES)).astype(int):
        skin[max(y - r, 0) : y + r + 1, max(x - r, 0) : x + r + 1] = True
    if not band.any() or not skin.any():
        return MouthVisibility(detail, 0.0)
    contrast = float(np.linalg.norm(lab[band].mean(0) - lab[skin].mean(0)))
    return MouthVisibility(detail, contrast)
