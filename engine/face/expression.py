"""How a photo's lips move besides the jaw: closing, pressing, and a posed smile easing.

A photo is one expression. Speech needs others: lips that meet for "p", "b", "m" even when
the photo smiles on its teeth, lips that press thin, and a broad posed smile that relaxes
towards a speaking mouth while the face talks (a smile frozen through a sentence is what
gives a photo away as a mask). Each is a per-landmark displacement field (pixels, at full
strength) built once from the rest landmarks, smooth in space so the warp never folds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.face.landmarks import (
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    LIPS_OUTER_LOWER,
    LIPS_OUTER_UPPER,
    MOUTH_CORNERS,
)

PRESS_THIN = 0.35  # pressed lips lose about this share of their height (at the lip's middle)
SMILE_FULL = 0.07  # a corner lift (mouth widths above the lips' centre line) that counts as a full smile
RELAX_DROP = 0.8  # a relaxed smile's corners come down this share of their lift
RELAX_IN = 0.07  # and in by this many mouth widths at a full smile
RELAX_CLOSE = 0.5  # and the lips close this share of the gap they smile with
PARTED = 0.02  # lips this far apart at rest (mouth widths, at the middle) have a gap to close


def _smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3 - 2 * x)


@dataclass(frozen=True)
class LipBases:
    """(468, 2) pixel displacements at full strength, and how much the photo smiles (0 .. 1)."""

    close: np.ndarray  # the inner lips meet on the line between them
    press: np.ndarray  # the lips thin towards that line
    relax: np.ndarray  # a posed smile eases: corners down and in (the rig also closes it ``RELAX_CLOSE``)
    smile: float
    parted: bool  # the lips are apart at rest (there is a gap to close)


def lip_bases(xy: np.ndarray, centre: np.ndarray, eu: np.ndarray, ev: np.ndarray, width: float) -> LipBases:
    """The bases for rest landmarks ``xy`` (468, 2) in a face frame (mouth ``centre``, unit axes
    ``eu`` along the eyes and ``ev`` down the face, mouth ``width`` in pixels)."""
    rel = xy - centre
    u, v = rel @ eu, rel @ ev
    hw = width / 2
    up, lo = np.array(LIPS_INNER_UPPER), np.array(LIPS_INNER_LOWER)
    order_up, order_lo = np.argsort(u[up]), np.argsort(u[lo])
    v_up = np.interp(u, u[up][order_up], v[up][order_up])
    v_lo = np.interp(u, u[lo][order_lo], v[lo][order_lo])
    seam = (v_up + v_lo) / 2
    gap = np.maximum(v_lo - v_up, 0.0)
    delta = v - seam
    outer_up, outer_lo = np.array(LIPS_OUTER_UPPER), np.array(LIPS_OUTER_LOWER)
    lip_h = max(float(np.mean(np.abs(np.concatenate([
        v[outer_up] - np.interp(u[outer_up], u[up][order_up], v[up][order_up]),
        v[outer_lo] - np.interp(u[outer_lo], u[lo][order_lo], v[lo][order_lo])])))), 0.04 * width)
    across = np.exp(-((u / (1.15 * hw)) ** 4))

    # Close: each lip moves half the gap towards the seam, less further from it.
    reach = gap / 2 + 1.5 * lip_h
    fall = 1 - _smoothstep((np.abs(delta) - gap / 2) / np.maximum(reach - gap / 2, 1e-3))
    close = (-np.sign(delta) * gap / 2 * fall * across)[:, None] * ev
    # The inner lips themselves: each facing pair (upper i, lower i) meets at its midpoint.
    middle = (xy[up] + xy[lo]) / 2
    close[up] = middle - xy[up]
    close[lo] = middle - xy[lo]
    # The corners shift onto the line the closed lips leave: the inner and outer corner and the
    # first closed pair in one line, so the thin triangles at the corner do not turn over.
    for inner, outer, first in ((up[0], MOUTH_CORNERS[0], 1), (up[-1], MOUTH_CORNERS[1], -2)):
        d = xy[inner] - xy[outer]
        normal = np.array([-d[1], d[0]]) / max(float(np.linalg.norm(d)), 1e-6)
        offset = float((middle[first] - xy[inner]) @ normal) * normal
        close[inner] = close[outer] = offset

    # Press: points beyond the inner lips are pulled towards them, most at a lip's height away
    # (the inner lips themselves do not move: closing them is ``close``'s).
    beyond = np.maximum(np.abs(delta) - gap / 2, 0.0)
    press = (-np.sign(delta) * PRESS_THIN * beyond * np.exp(-((beyond / lip_h) ** 2)) * across)[:, None] * ev

    # Relax: how far the corners sit above the lips' centre line.
    corners = np.array(MOUTH_CORNERS)
    mid = float(np.interp(0.0, u[up][order_up], seam[up][order_up]))
    lift = float(mid - v[corners].mean())
    smile = float(np.clip(lift / (SMILE_FULL * width), 0.0, 1.0))
    relax = np.zeros_like(xy, dtype=np.float64)
    for c, sign in ((corners[0], np.sign(u[corners[0]])), (corners[1], np.sign(u[corners[1]]))):
        w = np.exp(-(((u - u[c]) / (0.5 * hw)) ** 2) - (((v - v[c]) / (0.55 * hw)) ** 2))
        relax += (w * RELAX_DROP * max(lift, 0.0))[:, None] * ev
        relax += (w * -sign * RELAX_IN * width * smile)[:, None] * eu
    parted = bool(np.interp(0.0, u[up][order_up], gap[up][order_up]) > PARTED * width)
    return LipBases(close=close, press=press, relax=relax, smile=smile, parted=parted)
