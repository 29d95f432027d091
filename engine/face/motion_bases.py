"""How each landmark of a photo's face moves, per unit of each motion: per-landmark displacement
fields (pixels, at full strength) built once from the photo's landmarks.

The face at rest is the photo's own, except that lips apart in the photo (taken mid-word, a laugh, a
smile on its teeth) are brought together there: ``rest`` holds those offsets, and every other basis
is measured about the rest, so silence and "p", "b", "m" close every photo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.face.expression import PARTED, LipBases, lip_bases
from engine.face.landmarks import (
    FACE_OVAL,
    LEFT_EYE_LOWER,
    LEFT_EYE_UPPER,
    LEFT_LID_CREASE,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    LIPS_OUTER_LOWER,
    LIPS_OUTER_UPPER,
    LOWER_LIP_CENTER,
    MOUTH_CORNERS,
    NUM_LANDMARKS,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    RIGHT_LID_CREASE,
    UPPER_LIP_CENTER,
)

JAW_SCALE = 0.42  # lip gap added at jaw_open = 1, as a fraction of the mouth width
WIDTH_SCALE = 0.16  # lip-corner travel at |mouth_width| = 1, as a fraction of half the mouth width
LID_TRAVEL = 0.95  # how far the upper lid goes towards the lower one at blink = 1
LOWER_LID_TRAVEL = 0.05
CREASE_FOLLOW = 0.8  # the lid skin above the lid follows it by this fraction (the closed lid shows skin)
CHIN_FOLLOW = 0.7  # the chin drops this fraction of the lower lip's drop
# Closed lips keep this share of a rest gap between them: the mesh's triangles there keep an area.
CLOSE_MAX = 0.96
JAW_RISE = 0.8  # the share of a wide rest gap (a mouth open in the photo) that the jaw closes


def smoothstep(x: np.ndarray | float) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3 - 2 * x)


@dataclass(frozen=True)
class FaceAxes:
    """A face's own frame in its photo: ``eu`` along the eye line, ``ev`` down the face (unit
    vectors), the inner lips' ``centre`` and the mouth's ``width`` in pixels."""

    eu: np.ndarray
    ev: np.ndarray
    centre: np.ndarray
    width: float

    @classmethod
    def of(cls, xy: np.ndarray) -> FaceAxes:
        reye = xy[list(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER)].mean(0)
        leye = xy[list(LEFT_EYE_UPPER + LEFT_EYE_LOWER)].mean(0)
        eu = (leye - reye) / max(np.linalg.norm(leye - reye), 1e-6)
        centre = xy[list(LIPS_INNER_UPPER + LIPS_INNER_LOWER)].mean(0)
        width = float(np.linalg.norm(xy[MOUTH_CORNERS[1]] - xy[MOUTH_CORNERS[0]]))
        return cls(eu, np.array([-eu[1], eu[0]]), centre, width)

    def local(self, xy: np.ndarray, centre: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(u, v) of points ``xy`` about ``centre`` (default: the mouth's) along the face's axes."""
        rel = xy - (self.centre if centre is None else centre)
        return rel @ self.eu, rel @ self.ev


@dataclass(frozen=True)
class MotionBases:
    """(468, 2) displacements: ``jaw`` (lower lip centre dropped by ``JAW_SCALE`` mouth widths),
    ``width`` (corners out), ``blink`` (lids closed), the lips' own (``lips``), all about the face
    at rest, which is the photo's landmarks plus ``rest``."""

    jaw: np.ndarray
    width: np.ndarray
    blink: np.ndarray
    lips: LipBases
    rest: np.ndarray


def motion_bases(xy: np.ndarray, axes: FaceAxes) -> MotionBases:
    """The bases of a face whose (468, 2) landmarks in its photo are ``xy``."""
    rest = closed_rest(xy, axes)
    rest_xy = xy + rest
    rest_centre = rest_xy[list(LIPS_INNER_UPPER + LIPS_INNER_LOWER)].mean(0)
    u, v = axes.local(rest_xy, rest_centre)
    hw = axes.width / 2
    jaw = jaw_basis(u, v, axes) * (JAW_SCALE * axes.width)
    wgt = np.exp(-((u / (1.6 * hw)) ** 2 + (v / (0.9 * hw)) ** 2))
    width = (WIDTH_SCALE * u * wgt)[:, None] * axes.eu
    lips = lip_bases(rest_xy, rest_centre, axes.eu, axes.ev, axes.width)
    return MotionBases(jaw, width, blink_basis(xy), lips, rest)


def jaw_basis(u: np.ndarray, v: np.ndarray, axes: FaceAxes) -> np.ndarray:
    """(N, 2) jaw-drop direction times weight (lower lip centre = 1), for landmarks at (u, v)."""
    hw = axes.width / 2
    up = np.array(LIPS_INNER_UPPER)
    lo = np.array(LIPS_INNER_LOWER)
    seam_u = (u[up] + u[lo]) / 2
    seam_v = (v[up] + v[lo]) / 2
    order = np.argsort(seam_u)
    v_seam = np.interp(u, seam_u[order], seam_v[order])
    chin_v = float(v[list(FACE_OVAL)].max())
    band = 0.01 * chin_v + 0.3 * chin_v * smoothstep((np.abs(u) - 0.7 * hw) / (0.9 * hw))
    m = smoothstep(0.5 + (v - v_seam) / np.maximum(band, 1e-3))
    m[list(LIPS_OUTER_UPPER + LIPS_INNER_UPPER)] = 0.0
    m[list(LIPS_OUTER_LOWER + LIPS_INNER_LOWER)] = 1.0
    m[list(MOUTH_CORNERS) + [78, 308]] = 0.5
    g = np.exp(-((u / (1.5 * hw)) ** 2))
    # The lips part more than the chin drops: the weight eases from the lower lip to the chin.
    v_lip = float(v[LOWER_LIP_CENTER])
    g *= 1.0 - (1.0 - CHIN_FOLLOW) * smoothstep((v - v_lip) / max(chin_v - v_lip, 1e-3))
    w = m * g
    w /= max(w[LOWER_LIP_CENTER], 1e-6)
    return w[:, None] * axes.ev


def closed_rest(xy: np.ndarray, axes: FaceAxes) -> np.ndarray:
    """(468, 2) offsets that bring lips apart in the photo together (zero where they meet): the
    jaw rises to close most of a wide gap (a mouth open mid-word), the inner lips then meet pair
    by pair (all of a smile's narrow gap); what lay between them is kept behind the lips and shows
    again when the mouth opens."""
    gap = float((xy[LOWER_LIP_CENTER] - xy[UPPER_LIP_CENTER]) @ axes.ev)
    if gap <= PARTED * axes.width:
        return np.zeros_like(xy)
    rise = JAW_RISE * float(smoothstep((gap / axes.width - 0.05) / 0.15)) * gap
    raised = -rise * jaw_basis(*axes.local(xy), axes)
    closed = lip_bases(xy + raised, axes.centre, axes.eu, axes.ev, axes.width).close
    return raised + CLOSE_MAX * closed


def blink_basis(xy: np.ndarray) -> np.ndarray:
    """(N, 2): the upper lids onto the lower ones (which rise a little), the lid skin following."""
    d = np.zeros((NUM_LANDMARKS, 2))
    for upper, lower, crease in (
        (RIGHT_EYE_UPPER, RIGHT_EYE_LOWER, RIGHT_LID_CREASE),
        (LEFT_EYE_UPPER, LEFT_EYE_LOWER, LEFT_LID_CREASE),
    ):
        up, lo, cr = np.array(upper[1:-1]), np.array(lower[1:-1]), np.array(crease[1:-1])
        gap = xy[lo] - xy[up]
        d[up] = LID_TRAVEL * gap
        d[lo] = -LOWER_LID_TRAVEL * gap
        d[cr] = CREASE_FOLLOW * LID_TRAVEL * gap
    return d
