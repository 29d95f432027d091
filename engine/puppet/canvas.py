"""A float image plus signed-distance painting: soft edges give anti-aliasing for free.

Every shape is painted only inside its own bounding box, so a frame costs about as much
as the area of its parts rather than (number of parts) x (image area).
Coordinates: x right, y down, the image spans [-0.5, 0.5] on both axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.puppet.identity import RGB


@dataclass
class Patch:
    """Local coordinates of one shape's bounding box: ``u``/``v`` in the shape's frame.

    ``scale`` converts local distances back to image units (foreshortening divides them).
    """

    sl: tuple[slice, slice]
    u: np.ndarray
    v: np.ndarray
    scale: float


class Canvas:
    def __init__(self, size: int, top: RGB, bottom: RGB) -> None:
        self.size = size
        self.px = 1.0 / size
        self.xs = ((np.arange(size, dtype=np.float32) + 0.5) / size - 0.5)[None, :]
        self.ys = ((np.arange(size, dtype=np.float32) + 0.5) / size - 0.5)[:, None]
        t = self.ys + np.float32(0.5)
        # Planar (3, H, W): per-channel blends run on contiguous rows, ~3x faster than (H, W, 3).
        self.img = np.empty((3, size, size), dtype=np.float32)
        for c in range(3):
            self.img[c] = np.float32(top[c]) + np.float32(bottom[c] - top[c]) * t

    def patch(
        self, cx: float, cy: float, ex: float, ey: float, angle: float = 0.0, fx: float = 1.0, fy: float = 1.0
    ) -> Patch | None:
        """Local frame centred on (cx, cy), rotated by ``angle``, x/y divided by ``fx``/``fy``.

        ``ex``/``ey`` bound the shape's half-extent in local units; None when it is off-canvas.
        """
        c, s = math.cos(angle), math.sin(angle)
        hx = abs(c) * ex * fx + abs(s) * ey * fy + 2 * self.px
        hy = abs(s) * ex * fx + abs(c) * ey * fy + 2 * self.px
        n = self.size
        x0 = max(0, math.floor((cx - hx + 0.5) * n))
        x1 = min(n, math.ceil((cx + hx + 0.5) * n))
        y0 = max(0, math.floor((cy - hy + 0.5) * n))
        y1 = min(n, math.ceil((cy + hy + 0.5) * n))
        if x0 >= x1 or y0 >= y1:
            return None
        X = self.xs[:, x0:x1] - np.float32(cx)
        Y = self.ys[y0:y1] - np.float32(cy)
        if angle == 0.0:
            u = X * (1.0 / fx) + np.zeros_like(Y)
            v = Y * (1.0 / fy) + np.zeros_like(X)
        else:
            u = X * (c / fx) + Y * (s / fx)
            v = Y * (c / fy) - X * (s / fy)
        return Patch((slice(y0, y1), slice(x0, x1)), u, v, min(fx, fy))

    def fill(
        self,
        p: Patch,
        d: np.ndarray,
        colour: RGB,
        opacity: float = 1.0,
        feather: float = 0.0,
        shade: np.ndarray | None = None,
    ) -> None:
        """Blend ``colour`` (times ``shade`` per pixel, if given) where the distance ``d`` < 0.

        ``d`` is in local units; the edge ramps over one pixel, or over ``feather`` image
        units for soft shadows.
        """
        width = max(self.px, feather) / p.scale
        alpha = d * np.float32(-1.0 / width)
        alpha += np.float32(0.5)
        np.maximum(alpha, 0.0, out=alpha)
        np.minimum(alpha, 1.0, out=alpha)
        if opacity != 1.0:
            alpha *= np.float32(opacity)
        target = self.img[:, p.sl[0], p.sl[1]]
        col = np.asarray(colour, dtype=np.float32)[:, None, None]
        diff = target - (col if shade is None else shade * col)
        diff *= alpha
        target -= diff

    def to_uint8(self) -> np.ndarray:
        x = self.img
        x *= np.float32(255.0)
        x += np.float32(0.5)
        np.clip(x, 0.0, 255.0, out=x)
        return np.ascontiguousarray(x.astype(np.uint8).transpose(1, 2, 0))


def ellipse(u: np.ndarray, v: np.ndarray, a: float, b: float) -> np.ndarray:
    """Approximate signed distance to an ellipse (exact on the axes, good enough for edges)."""
    ia2 = 1.0 / max(a, 1e-5) ** 2
    ib2 = 1.0 / max(b, 1e-5) ** 2
    u2 = u * u
    v2 = v * v
    k0 = np.sqrt(u2 * np.float32(ia2) + v2 * np.float32(ib2))
    k1 = np.sqrt(u2 * np.float32(ia2 * ia2) + v2 * np.float32(ib2 * ib2))
    np.maximum(k1, np.float32(1e-6), out=k1)
    return (k0 * k0 - k0) / k1


def circle(u: np.ndarray, v: np.ndarray, r: float) -> np.ndarray:
    return np.sqrt(u * u + v * v) - np.float32(r)


def capsule(u: np.ndarray, v: np.ndarray, half_length: float, r: float) -> np.ndarray:
    """Horizontal segment of half-length ``half_length`` thickened by ``r``."""
    q = np.maximum(np.abs(u) - np.float32(half_length), 0.0)
    return np.sqrt(q * q + v * v) - np.float32(r)


def rounded_box(u: np.ndarray, v: np.ndarray, hx: float, hy: float, r: float) -> np.ndarray:
    qx = np.abs(u) - np.float32(hx - r)
    qy = np.abs(v) - np.float32(hy - r)
    ox = np.maximum(qx, 0.0)
    oy = np.maximum(qy, 0.0)
    return np.sqrt(ox * ox + oy * oy) + np.minimum(np.maximum(qx, qy), 0.0) - np.float32(r)
