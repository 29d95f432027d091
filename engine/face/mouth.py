"""The inside of a photo's mouth, drawn between its moving lips.

``MouthInterior`` is built once per photo: from the rest landmarks it lays out the face's
mouth coordinates (origin at the lips' centre, one unit a mouth width, along the eye line
and down the face), takes the colours from the photo (``engine.face.palette``) and draws
three textures there, supersampled then reduced to the output's scale (``engine.face.teeth``):

* the cavity, behind everything;
* the lower arch with the tongue behind it, which moves with the jaw;
* the upper arch, rigid with the skull: drawn teeth, or the photo's own teeth where it shows
  them (kept, and continued below by the drawn lower arch, tongue and cavity).

Per frame ``paint`` moves the textures with the head (an affine fit of the head's motion at
the teeth's depth) and the lower ones also with the jaw, composes them, shades them by the
lips' shadow and the mouth's corners, lays a wet inner-lip edge along both lips, and blends
the result into the frame inside the inner lip contour through an anti-aliased mask.
Nothing in the textures changes between frames: at the same opening and pose the interior is
the same picture.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.landmarks import LIPS_INNER_LOWER, LIPS_INNER_UPPER
from engine.face.palette import MouthPalette
from engine.face.teeth import LOWER, MOUTH_MM, UPPER, draw_arch, draw_cavity, draw_tongue

SUPERSAMPLE = 4  # texture samples per output pixel, each way, when the textures are drawn
EXTENT_U = 0.72  # the textures span +-this many mouth widths across
EXTENT_V = (-0.4, 0.85)  # and this far up / down the face from the lips' centre
UPPER_SHOW = 0.09  # upper incisal edge below the upper inner lip at rest, mouth widths (~3.5 mm)
OVERBITE = 0.045  # the lower incisal edge this far above the upper one at rest (behind it)
LOWER_LIGHT = 0.82  # the lower teeth, further inside the mouth, catch less light
ARCH_FOLLOW = 0.5  # how much of the lip line's curve the incisal line follows
TONGUE_ABOVE = 6.0  # millimetres the tongue's back shows above the lower incisal edge, seen from the front
# The photo's own teeth stop this far (a fraction of the mouth width) above where its lower lip lay:
# the face mesh reads a mouth opening on a band of real teeth less surely.
OWN_TEETH_CUT = 0.025
LIP_SHADOW = (0.25, 0.03)  # strength and reach (mouth widths) of the upper lip's shadow
LOWER_SHADOW = (0.25, 0.03)
CORNER_SHADOW = 0.7
WET_EDGE = 0.012  # mouth widths: the wet inner lip's band inside the opening
WET_SHEEN = 0.22
PRESS_LINE, PRESS_LINE_WIDTH = 0.35, 1.2  # pressed lips: the line between them this much darker, this wide (px)


def smooth_contour(points: np.ndarray, per_segment: int = 4) -> np.ndarray:
    """A lip contour (n, 2) through its points as a Catmull-Rom curve: the mesh has 11 points a
    lip, and an opening drawn through them as a polygon shows its corners."""
    p = np.concatenate([points[:1], points, points[-1:]])
    t = np.linspace(0, 1, per_segment, endpoint=False)[:, None]
    out = []
    for i in range(1, len(p) - 2):
        p0, p1, p2, p3 = p[i - 1], p[i], p[i + 1], p[i + 2]
        out.append(0.5 * (2 * p1 + (p2 - p0) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t**2
                          + (3 * p1 - p0 - 3 * p2 + p3) * t**3))
    return np.concatenate(out + [points[-1:]])


@dataclass(frozen=True)
class Opening:
    """The space between a frame's inner lips: both lips as smooth curves and the pixel box
    around them (padded a little), where an interior is composed and blended in."""

    upper: np.ndarray
    lower: np.ndarray
    x0: int
    y0: int
    x1: int
    y1: int

    PAD = 3

    @classmethod
    def of(cls, landmarks: np.ndarray, shape: tuple[int, int]) -> Opening | None:
        """The opening of the moved (468, >=2) ``landmarks`` in a frame of ``shape``; None if empty."""
        up = smooth_contour(landmarks[list(LIPS_INNER_UPPER), :2])
        lo = smooth_contour(landmarks[list(LIPS_INNER_LOWER), :2])
        poly = np.concatenate([up, lo[::-1]])
        x0 = int(max(np.floor(poly[:, 0].min()) - cls.PAD, 0))
        x1 = int(min(np.ceil(poly[:, 0].max()) + cls.PAD + 1, shape[1]))
        y0 = int(max(np.floor(poly[:, 1].min()) - cls.PAD, 0))
        y1 = int(min(np.ceil(poly[:, 1].max()) + cls.PAD + 1, shape[0]))
        if x1 <= x0 or y1 <= y0:
            return None
        return cls(up, lo, x0, y0, x1, y1)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the box, as OpenCV takes it."""
        return self.x1 - self.x0, self.y1 - self.y0

    def blend(self, out: np.ndarray, col: np.ndarray, strength: float, widen: float = 0.0) -> None:
        """Lay the box's colours ``col`` into ``out`` inside the opening (anti-aliased), faded by
        ``strength``; ``widen`` in [0, 1] also covers a 2-pixel fringe around it that strongly."""
        poly = np.concatenate([self.upper, self.lower[::-1]])
        mask = np.zeros(col.shape[:2], np.uint8)
        shift = 4
        pts = np.round((poly - [self.x0, self.y0]) * (1 << shift)).astype(np.int32)
        cv2.fillPoly(mask, [pts], 255, cv2.LINE_AA, shift)
        if widen > 0:
            cv2.polylines(mask, [pts], True, int(255 * widen), 2, cv2.LINE_AA, shift)
        alpha = (mask.astype(np.float32) * (strength / 255.0))[..., None]
        region = out[self.y0 : self.y1, self.x0 : self.x1].astype(np.float32)
        out[self.y0 : self.y1, self.x0 : self.x1] = np.clip(region + (col - region) * alpha + 0.5, 0, 255).astype(
            np.uint8)


def press_line(out: np.ndarray, landmarks: np.ndarray, amount: float) -> None:
    """Deepen the line where closed lips meet (in place): pressed lips show it darker, fading out
    towards the corners. ``amount`` in [0, 1]."""
    opening = Opening.of(landmarks, out.shape[:2])
    if opening is None or amount <= 0:
        return
    up, lo = opening.upper, opening.lower
    xs = np.arange(opening.x0, opening.x1, dtype=np.float32)
    middle = (np.interp(xs, *up[np.argsort(up[:, 0])].T) + np.interp(xs, *lo[np.argsort(lo[:, 0])].T)) / 2
    ys = np.arange(opening.y0, opening.y1, dtype=np.float32)[:, None]
    cx, hw = (up[0, 0] + up[-1, 0]) / 2, max(abs(up[-1, 0] - up[0, 0]) / 2, 1.0)
    along = np.clip(1 - np.abs(xs - cx) / hw, 0, 1) ** 0.5
    dark = PRESS_LINE * amount * np.exp(-(((ys - middle[None, :]) / PRESS_LINE_WIDTH) ** 2)) * along[None, :]
    region = out[opening.y0 : opening.y1, opening.x0 : opening.x1].astype(np.float32)
    out[opening.y0 : opening.y1, opening.x0 : opening.x1] = np.clip(region * (1 - dark[..., None]) + 0.5, 0,
                                                                     255).astype(np.uint8)


def _compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The 2x3 affine of ``a`` after ``b``."""
    a3, b3 = np.vstack([a, [0, 0, 1]]), np.vstack([b, [0, 0, 1]])
    return (a3 @ b3)[:2]


def _shift(d: np.ndarray) -> np.ndarray:
    return np.array([[1.0, 0.0, d[0]], [0.0, 1.0, d[1]]])


@dataclass(frozen=True)
class MouthFrame:
    """Mouth coordinates of a photo at rest: centre (px), unit axes, a mouth width in px."""

    centre: np.ndarray
    eu: np.ndarray
    ev: np.ndarray
    width: float

    def to_local(self, xy: np.ndarray) -> np.ndarray:
        rel = (np.asarray(xy, np.float64) - self.centre) / self.width
        return np.stack([rel @ self.eu, rel @ self.ev], -1)

    def to_pixels(self, uv: np.ndarray) -> np.ndarray:
        uv = np.asarray(uv, np.float64)
        return self.centre + self.width * (uv[..., :1] * self.eu + uv[..., 1:2] * self.ev)


def _lip_curve(frame: MouthFrame, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uv = frame.to_local(points)
    order = np.argsort(uv[:, 0])
    return uv[order, 0], uv[order, 1]


class MouthInterior:
    """One photo's mouth interior (``paint`` it into each frame)."""

    def __init__(self, image: np.ndarray, landmarks: np.ndarray, frame: MouthFrame, palette: MouthPalette) -> None:
        self.frame = frame
        self.palette = palette
        xy = np.asarray(landmarks, np.float64)[:, :2]
        self._up_u, self._up_v = _lip_curve(frame, xy[list(LIPS_INNER_UPPER)])
        self._lo_u, self._lo_v = _lip_curve(frame, xy[list(LIPS_INNER_LOWER)])
        k = max(frame.width, 8.0)  # texels per mouth width: one per output pixel at rest
        self._k = k
        self._shape = (int(round((EXTENT_V[1] - EXTENT_V[0]) * k)), int(round(2 * EXTENT_U * k)))
        self.cavity, self.lower, self.upper = self._draw(image)
        s = frame.width / k
        origin = frame.to_pixels(np.array([-EXTENT_U + 0.5 / k, EXTENT_V[0] + 0.5 / k]))
        self._texture_to_rest = np.array([[frame.eu[0] * s, frame.ev[0] * s, origin[0]],
                                          [frame.eu[1] * s, frame.ev[1] * s, origin[1]]])

    # ---- textures, once ----------------------------------------------------------------------------------------
    def _grid(self, supersample: int) -> tuple[np.ndarray, np.ndarray]:
        h, w = self._shape
        n = self._k * supersample
        u = -EXTENT_U + (np.arange(w * supersample) + 0.5) / n
        v = EXTENT_V[0] + (np.arange(h * supersample) + 0.5) / n
        return np.meshgrid(u, v)

    def _incisal_line(self, u: np.ndarray) -> np.ndarray:
        """The upper incisal edge per column (mouth units): ``UPPER_SHOW`` below the upper inner lip
        at rest, or where the photo's own teeth end; its curve damped towards its middle."""
        if self.palette.shows_teeth:
            lip_u, lip_v, below = self._lo_u, self._lo_v, -OWN_TEETH_CUT
        else:
            lip_u, lip_v, below = self._up_u, self._up_v, UPPER_SHOW
        line = np.interp(u, lip_u, lip_v)
        middle = float(np.interp(0.0, lip_u, lip_v))
        return middle + ARCH_FOLLOW * (line - middle) + below

    def _draw(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.palette
        u, v = self._grid(SUPERSAMPLE)
        x, y = u * MOUTH_MM, v * MOUTH_MM
        pixel = MOUTH_MM / (self._k * SUPERSAMPLE)
        upper_edge = self._incisal_line(u) * MOUTH_MM
        lower_edge = upper_edge - OVERBITE * MOUTH_MM
        if p.shows_teeth:  # a smile on its upper teeth hides the lower ones just behind the lower lip
            lower_edge = np.maximum(lower_edge, (np.interp(u, self._lo_u, self._lo_v) + 0.01) * MOUTH_MM)
        cavity = draw_cavity(x, y, float(np.median(upper_edge)) + 5.0, p.cavity_wall, p.cavity_deep)
        tongue, tongue_a = draw_tongue(x, y, lower_edge - TONGUE_ABOVE, p.tongue, pixel)
        teeth, teeth_a = draw_arch(x, y, lower_edge, LOWER, p.enamel * LOWER_LIGHT, p.gum, pixel, p.cavity_wall)
        behind = (tongue_a * (1 - teeth_a))[..., None]
        lower = np.concatenate([teeth + tongue * behind, teeth_a[..., None] + behind], -1)
        if p.shows_teeth:
            upper = self._own_teeth(image)
        else:
            col, a = draw_arch(x, y, upper_edge, UPPER, p.enamel, p.gum, pixel, p.cavity_wall)
            upper = self._reduce(np.concatenate([col, a[..., None]], -1))
        return self._reduce(cavity), self._reduce(lower), upper

    def _reduce(self, texture: np.ndarray) -> np.ndarray:
        h, w = self._shape
        return cv2.resize(texture, (w, h), interpolation=cv2.INTER_AREA).astype(np.float32)

    def _own_teeth(self, image: np.ndarray) -> np.ndarray:
        """The photo's own mouth at rest (premultiplied RGBA), down to a little short of its lower lip."""
        u, v = self._grid(1)
        src = self.frame.to_pixels(np.stack([u, v], -1)).astype(np.float32)
        own = cv2.remap(image, src[..., 0], src[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        top = np.interp(u, self._up_u, self._up_v)
        bottom = np.interp(u, self._lo_u, self._lo_v) - OWN_TEETH_CUT
        px = 1.0 / self._k
        across = np.clip((u - self._up_u[0]) / (2 * px), 0, 1) * np.clip((self._up_u[-1] - u) / (2 * px), 0, 1)
        inside = np.clip((v - top) / px + 1.5, 0, 1) * np.clip((bottom - v) / (1.5 * px), 0, 1) * across
        return np.concatenate([own.astype(np.float32) * inside[..., None], inside[..., None]], -1).astype(np.float32)

    # ---- per frame ---------------------------------------------------------------------------------------------
    def paint(self, out: np.ndarray, landmarks: np.ndarray, skull: np.ndarray, jaw: np.ndarray,
              strength: float, meeting: float = 0.0) -> None:
        """Paint into ``out`` (in place) between the inner lips of the moved (468, 2) ``landmarks``;
        ``skull``: the 2x3 affine taking rest pixels to this frame's at the teeth's depth; ``jaw``:
        the lower jaw's shift in rest pixels; ``strength`` in [0, 1] fades the whole interior in;
        ``meeting`` in [0, 1]: the lips are closing over the gap left between them, which shows
        the inside of the lips meeting on a dark line instead."""
        opening = Opening.of(landmarks, out.shape[:2])
        if opening is None or strength <= 0:
            return
        up, lo, x0, y0, x1, y1 = opening.upper, opening.lower, opening.x0, opening.y0, opening.x1, opening.y1
        h, w = y1 - y0, x1 - x0
        to_box = _shift(np.array([-x0, -y0], np.float64))
        upper_m = _compose(to_box, _compose(skull, self._texture_to_rest))
        lower_m = _compose(to_box, _compose(skull, _compose(_shift(jaw), self._texture_to_rest)))
        own = self.palette.shows_teeth  # the photo's own teeth carry their own light and lip edge
        col = cv2.warpAffine(self.cavity, upper_m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        lower = cv2.warpAffine(self.lower, lower_m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        upper = cv2.warpAffine(self.upper, upper_m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        col = col * (1 - lower[..., 3:]) + lower[..., :3]
        if not own:
            col = col * (1 - upper[..., 3:]) + upper[..., :3]

        # The lips' shadow and the corners' depth, per column of the opening.
        xs = np.arange(x0, x1, dtype=np.float32)
        ou, ol = np.argsort(up[:, 0]), np.argsort(lo[:, 0])
        y_up = np.interp(xs, up[ou, 0], up[ou, 1])
        y_lo = np.interp(xs, lo[ol, 0], lo[ol, 1])
        ys = np.arange(y0, y1, dtype=np.float32)[:, None]
        mw = self.frame.width
        a = np.maximum(ys - y_up[None, :], 0) / mw  # below the upper lip
        b = np.maximum(y_lo[None, :] - ys, 0) / mw  # above the lower lip
        cx = (up[0, 0] + up[-1, 0]) / 2
        hw = max(abs(up[-1, 0] - up[0, 0]) / 2, 1.0)
        side = np.clip(np.abs(xs - cx) / hw, 0, 1)[None, :]
        shade = ((1 - LIP_SHADOW[0] * np.exp(-a / LIP_SHADOW[1])) * (1 - LOWER_SHADOW[0] * np.exp(-b / LOWER_SHADOW[1]))
                 * (1 - CORNER_SHADOW * side**3))
        col = col * shade[..., None]
        # The wet inner lip: a band of the lips' darker, wetter inside along both lips, with a sheen on the lower.
        p = self.palette
        inner_lip = p.lip * np.array([0.78, 0.62, 0.64], np.float32)
        wet_lower = np.exp(-((b / WET_EDGE) ** 2))
        wet = (wet_lower if own else np.maximum(np.exp(-((a / WET_EDGE) ** 2)), wet_lower)) * (1 - side**6)
        col = col * (1 - wet[..., None]) + inner_lip[None, None, :] * wet[..., None]
        sheen = WET_SHEEN * np.exp(-(((b - 0.4 * WET_EDGE) / (0.35 * WET_EDGE)) ** 2)) * (1 - side**2)
        col = col + (np.minimum(p.sclera, 255.0) - col) * sheen[..., None]
        if own:
            col = col * (1 - upper[..., 3:]) + upper[..., :3]

        if meeting > 0:
            middle = np.abs(ys - (y_up + y_lo)[None, :] / 2) / np.maximum((y_lo - y_up)[None, :] / 2, 0.5)
            lips = p.lip[None, None, :] * (0.68 + 0.27 * np.clip(middle, 0, 1)[..., None])
            col = col * (1 - meeting) + lips * meeting

        opening.blend(out, col, strength, widen=meeting)
