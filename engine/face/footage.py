"""A person's own mouth, taken from their footage: what lies between their lips at each opening.

A ``MouthBank`` (made by ``engine.personal.enroll``) holds, for each opening and mouth width
the footage showed, one real frame's mouth region (aligned to the avatar's rest frame) and its
inner-lip contour. ``FootageMouth``
paints it into a rig's frames in place of a drawn interior: the entries nearest the frame's
opening (read off the moved inner lips, as it was read off the footage) are warped so their
inner lips land on the frame's, blended by nearness, and laid in through an anti-aliased mask.
The teeth, tongue and mouth shown are the person's own; openings the footage never showed fall
back to the drawn interior (``MouthBank.coverage`` says how much of the jaw's travel that is).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.landmarks import LIPS_INNER_LOWER, LIPS_INNER_UPPER, MOUTH_CORNERS
from engine.face.mouth import MouthInterior, Opening

# The inner-lip ring without the corners twice: the points an entry is warped by.
RING = tuple(dict.fromkeys(LIPS_INNER_UPPER + LIPS_INNER_LOWER[::-1]))
OPENING_STEP = 0.03  # entries are kept per this much opening (lip gap over the rest mouth width)
WIDTH_EDGES = (0.96, 1.04)  # mouth width over the rest width: rounded below, wide above
REACH = 0.05  # an entry serves openings this far from its own; beyond, the drawn interior does
PATCH_EXTENT = (0.8, 0.55, 0.9)  # a patch spans +-0.8 mouth widths across, 0.55 up, 0.9 down


def opening(landmarks: np.ndarray, rest_width: float) -> float:
    """The inner lips' gap over the rest mouth width (middle five pairs, as ``lip_gap``)."""
    up = landmarks[list(LIPS_INNER_UPPER[3:8]), :2]
    lo = landmarks[list(LIPS_INNER_LOWER[3:8]), :2]
    return float(np.linalg.norm(lo - up, axis=1).mean() / max(rest_width, 1e-6))


def width_ratio(landmarks: np.ndarray, rest_width: float) -> float:
    a, b = landmarks[list(MOUTH_CORNERS), :2]
    return float(np.linalg.norm(b - a) / max(rest_width, 1e-6))


def width_bin(ratio: float) -> int:
    return int(np.searchsorted(WIDTH_EDGES, ratio))


@dataclass(frozen=True)
class MouthBank:
    """Entries of one person's mouth: (K, h, w, 3) uint8 patches, (K, len(RING), 2) float32
    inner-lip points in patch pixels, (K,) openings and width bins; the rest mouth width in
    pixels; ``coverage`` in [0, 1]: the share of the jaw's travel the entries serve."""

    patches: np.ndarray
    lips: np.ndarray
    openings: np.ndarray
    widths: np.ndarray
    rest_width: float
    coverage: float

    @property
    def nbytes(self) -> int:
        return int(self.patches.nbytes + self.lips.nbytes + self.openings.nbytes + self.widths.nbytes)

    def nearest(self, value: float, width: int) -> list[tuple[int, float]]:
        """(entry, weight) of the one or two entries that serve ``value`` at ``width`` (other widths
        when this one has none near); empty when none is within ``REACH``."""
        if not len(self.openings):
            return []
        near = np.array([], np.int64)
        for pool in (np.flatnonzero(self.widths == width), np.arange(len(self.openings))):
            near = pool[np.abs(self.openings[pool] - value) <= REACH]
            if near.size:
                break
        if near.size == 0:
            return []
        order = near[np.argsort(np.abs(self.openings[near] - value))][:2]
        if len(order) == 1:
            return [(int(order[0]), 1.0)]
        a, b = order
        da, db = abs(self.openings[a] - value), abs(self.openings[b] - value)
        wa = db / max(da + db, 1e-9)
        return [(int(a), float(wa)), (int(b), float(1 - wa))]


def bank_from_entries(patches: list[np.ndarray], lips: list[np.ndarray], openings: list[float],
                      widths: list[int], rest_width: float, full_opening: float) -> MouthBank:
    """A bank of the chosen entries; coverage measured over openings 0 .. ``full_opening``."""
    o = np.array(openings, np.float32)
    grid = np.arange(0.0, full_opening + 1e-9, OPENING_STEP / 2)
    served = [bool(len(o)) and float(np.min(np.abs(o - g))) <= REACH for g in grid]
    return MouthBank(
        patches=np.stack(patches) if patches else np.zeros((0, 1, 1, 3), np.uint8),
        lips=np.stack(lips).astype(np.float32) if lips else np.zeros((0, len(RING), 2), np.float32),
        openings=o, widths=np.array(widths, np.int8), rest_width=float(rest_width),
        coverage=float(np.mean(served)) if len(grid) else 0.0)


def _fit_affine(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 2x3 affine taking (n, 2) ``src`` points nearest to ``dst`` (least squares over all of them:
    every lip point counts, none is an outlier)."""
    a = np.concatenate([src, np.ones((len(src), 1))], axis=1).astype(np.float64)
    m, *_ = np.linalg.lstsq(a, dst.astype(np.float64), rcond=None)
    return m.T


class FootageMouth:
    """A rig's mouth interior from a ``MouthBank``, the drawn one (``fallback``) where it has none."""

    def __init__(self, bank: MouthBank, fallback: MouthInterior) -> None:
        self.bank = bank
        self.fallback = fallback
        self.frame = fallback.frame
        self.palette = fallback.palette

    def paint(self, out: np.ndarray, landmarks: np.ndarray, skull: np.ndarray, jaw: np.ndarray,
              strength: float, meeting: float = 0.0) -> None:
        # Read the opening as the footage was read: in the rest frame, the head's turn taken out.
        still = cv2.transform(landmarks[None, :, :2].astype(np.float64), cv2.invertAffineTransform(skull))[0]
        value = opening(still, self.bank.rest_width)
        chosen = self.bank.nearest(value, width_bin(width_ratio(still, self.bank.rest_width)))
        if not chosen or meeting > 0:
            self.fallback.paint(out, landmarks, skull, jaw, strength, meeting)
            return
        target = landmarks[list(RING), :2].astype(np.float32)
        box = Opening.of(landmarks, out.shape[:2])
        if box is None or strength <= 0:
            return
        col = np.zeros((box.y1 - box.y0, box.x1 - box.x0, 3), np.float32)
        for entry, weight in chosen:
            m = _fit_affine(self.bank.lips[entry], target - [box.x0, box.y0])
            col += weight * cv2.warpAffine(self.bank.patches[entry], m, box.size, flags=cv2.INTER_LINEAR,
                                           borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
        box.blend(out, col, strength)
