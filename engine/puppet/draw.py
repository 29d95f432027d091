"""Draw one frame of the puppet: identity (who) x face state (what the face does now).

The head is a flat 2D drawing with a pseudo-3D pose: inner features sit at a depth in
front of the head's rotation axis, so yaw and pitch slide and foreshorten them while the
outline stays put, and roll turns the whole head about the neck.
"""

from __future__ import annotations

import math

import numpy as np

from engine.puppet.canvas import Canvas, Patch, capsule, circle, ellipse, rounded_box
from engine.puppet.identity import RGB, Identity, get_identity
from engine.puppet.state import NEUTRAL, FaceState

HEAD_Y = -0.06  # head centre, image units; leaves room for hair above and shoulders below
SCLERA: RGB = (0.96, 0.95, 0.93)
PUPIL: RGB = (0.05, 0.04, 0.04)
LASH: RGB = (0.13, 0.09, 0.08)
MOUTH_INSIDE: RGB = (0.26, 0.06, 0.08)
TEETH: RGB = (0.96, 0.94, 0.88)
TONGUE: RGB = (0.78, 0.36, 0.40)


def _shade(c: RGB, k: float) -> RGB:
    return (c[0] * k, c[1] * k, c[2] * k)


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


class _Pose:
    """Maps head-relative points (image units, z towards the viewer) to the image.

    A feature at depth z in front of the rotation axis slides by z*sin(angle) and is
    foreshortened by the obliquity of its surface normal, (x, z) turned by yaw.
    """

    def __init__(self, cx: float, cy: float, pivot_y: float, state: FaceState) -> None:
        self.cx, self.cy, self.pivot_x, self.pivot_y = cx, cy, cx, pivot_y
        self.roll = state.roll
        self.cyw, self.syw = math.cos(state.yaw), math.sin(state.yaw)
        self.cp, self.sp = math.cos(state.pitch), math.sin(state.pitch)
        self.cr, self.sr = math.cos(state.roll), math.sin(state.roll)

    def place(self, x: float, y: float, z: float) -> tuple[float, float, float, float]:
        """Image position and (horizontal, vertical) foreshortening of a feature at (x, y, z)."""
        x1 = x * self.cyw + z * self.syw
        y1 = y * self.cp + (z * self.cyw - x * self.syw) * self.sp
        if z > 0:
            fx = min(max(self.cyw - x / z * self.syw, 0.25), 1.15)
            fy = min(max(self.cp - y / z * self.sp, 0.4), 1.15)
        else:
            fx = fy = 1.0
        px, py = self.cx + x1 - self.pivot_x, self.cy + y1 - self.pivot_y
        return self.pivot_x + px * self.cr - py * self.sr, self.pivot_y + px * self.sr + py * self.cr, fx, fy


def render(identity: Identity | str, state: FaceState = NEUTRAL, size: int = 256) -> np.ndarray:
    """One RGB frame, (size, size, 3) uint8; a pure function of its arguments."""
    ident = get_identity(identity) if isinstance(identity, str) else identity
    return _Painter(ident, state, size).draw()


def render_video(identity: Identity | str, states: list[FaceState], size: int = 256) -> np.ndarray:
    """(T, size, size, 3) uint8 frames for a whole face track."""
    out = np.empty((len(states), size, size, 3), dtype=np.uint8)
    for i, s in enumerate(states):
        out[i] = render(identity, s, size)
    return out


def reference_image(name_or_identity: Identity | str, size: int = 256) -> np.ndarray:
    """The avatar's neutral portrait (mouth closed, eyes open, head centred): its reference."""
    return render(name_or_identity, NEUTRAL, size)


class _Painter:
    def __init__(self, ident: Identity, state: FaceState, size: int) -> None:
        self.id = ident
        self.s = state
        self.cv = Canvas(size, ident.background_top, ident.background_bottom)
        self.detail = size >= 96  # skip sub-pixel touches (pupils, glints, nostrils) on small frames
        self.fw = ident.face_width
        self.fh = ident.face_height
        cx, cy = state.tx, HEAD_Y + state.ty
        self.pose = _Pose(cx, cy, cy + 0.85 * self.fh, state)

    def draw(self) -> np.ndarray:
        if self.id.hair_style == "long":
            self._hair_back()
        self._body()
        self._ears()
        self._face()
        self._hair_front()
        self._nose()
        for side in (-1.0, 1.0):
            self._eye(side)
            self._brow(side)
        self._mouth()
        if self.id.accessory == "glasses":
            self._glasses()
        elif self.id.accessory == "earrings":
            self._earrings()
        return self.cv.to_uint8()

    def _patch(self, x: float, y: float, z: float, ex: float, ey: float) -> Patch | None:
        px, py, fx, fy = self.pose.place(x, y, z)
        return self.cv.patch(px, py, ex, ey, self.pose.roll, fx, fy)

    def _hair_back(self) -> None:
        fw, fh = self.fw, self.fh
        p = self._patch(0.0, 0.45 * fh, 0.0, 1.3 * fw, 1.5 * fh)
        if p is not None:
            d = rounded_box(p.u, p.v, 1.28 * fw, 1.5 * fh, 0.9 * fw)
            self.cv.fill(p, d, _shade(self.id.hair, 0.78))

    def _body(self) -> None:
        fw, fh, s = self.fw, self.fh, self.s
        bx, by = 0.4 * s.tx, 0.3 * s.ty
        neck_y = HEAD_Y + by + 0.95 * fh
        p = self.cv.patch(bx, neck_y, 0.45 * fw, 0.5 * fh)
        if p is not None:
            self.cv.fill(p, rounded_box(p.u, p.v, 0.42 * fw, 0.5 * fh, 0.1 * fw), _shade(self.id.skin, 0.8))
        sy = 0.63 + by
        p = self.cv.patch(bx, sy, 0.5, 0.3)
        if p is not None:
            body = ellipse(p.u, p.v, 0.47, 0.3)
            self.cv.fill(p, body, self.id.shirt)
            collar = np.maximum(ellipse(p.u, p.v + np.float32(0.3), 0.45 * fw, 0.07), body)
            self.cv.fill(p, collar, _shade(self.id.skin, 0.8))

    def _ears(self) -> None:
        fw, fh = self.fw, self.fh
        for side in (-1.0, 1.0):
            p = self._patch(side * 0.97 * fw, 0.02 * fh, -0.1 * fw, 0.2 * fw, 0.18 * fh)
            if p is not None:
                d = ellipse(p.u, p.v, 0.19 * fw, 0.17 * fh)
                self.cv.fill(p, d, _shade(self.id.skin, 0.92))
                if not self.detail:
                    continue
                inner = ellipse(p.u - np.float32(side * 0.03 * fw), p.v, 0.09 * fw, 0.1 * fh)
                self.cv.fill(p, inner, _shade(self.id.skin, 0.78), feather=0.01)

    def _face(self) -> None:
        fw, fh, s, ident = self.fw, self.fh, self.s, self.id
        jaw_drop = 1.0 + 0.07 * s.openness
        p = self._patch(0.0, 0.0, 0.15 * fw, fw, fh * jaw_drop)
        if p is None:
            return
        u, v = p.u, p.v
        if jaw_drop != 1.0:
            v = np.where(v > 0, v * np.float32(1.0 / jaw_drop), v)
        vn = v * np.float32(1.0 / fh)
        below = np.minimum(np.maximum(vn, 0.0), 1.0)
        rx = np.float32(fw) - np.float32(fw * ident.jaw_taper) * (below * below)
        un = u / rx
        x2 = un * un
        y2 = vn * vn
        q = np.sqrt(x2 + y2)
        if ident.jaw_square > 0:
            # Blend the L2 and L4 norms: a squircle-ish jaw without a costly np.power.
            q4 = np.sqrt(np.sqrt(x2 * x2 + y2 * y2))
            q += np.float32(ident.jaw_square) * (q4 - q)
        d = (q - 1.0) * np.minimum(rx, np.float32(fh))
        rim = np.minimum(np.maximum(q - np.float32(0.55), 0.0), np.float32(0.45))
        light = np.float32(1.0) - np.float32(0.1 / 0.45) * rim - np.float32(0.05 / fw) * u
        self.cv.fill(p, d, ident.skin, shade=light)
        if ident.blush > 0 and self.detail:
            blush = _mix(ident.skin, (0.93, 0.42, 0.45), 0.5)
            for side in (-1.0, 1.0):
                b = self._patch(side * 0.55 * fw, 0.3 * fh, 0.7 * fw, 0.3 * fw, 0.22 * fh)
                if b is not None:
                    d = ellipse(b.u, b.v, 0.16 * fw, 0.1 * fh)
                    self.cv.fill(b, d, blush, opacity=0.45 * ident.blush, feather=0.03)

    def _hair_front(self) -> None:
        style, fw, fh = self.id.hair_style, self.fw, self.fh
        if style == "bald":
            p = self._patch(-0.3 * fw, -0.7 * fh, 0.5 * fw, 0.4 * fw, 0.2 * fh)
            if p is not None:
                self.cv.fill(p, ellipse(p.u, p.v, 0.3 * fw, 0.12 * fh), (1.0, 1.0, 1.0), 0.18, feather=0.03)
            return
        top = 1.25 * fh if style == "bun" else 1.08 * fh
        p = self._patch(0.0, -0.1 * fh, 0.35 * fw, 1.35 * fw, top)
        if p is None:
            return
        u, v = p.u, p.v
        cap = ellipse(u, v + np.float32(0.04 * fh), 1.08 * fw, 0.98 * fh)
        un = u * np.float32(1.0 / fw)
        if style == "fringe":
            edge = -0.32 * fh + 0.5 * fh * un * un + 0.025 * fh * np.abs(np.sin(un * np.float32(9.0)))
        elif style == "bun":
            edge = -0.62 * fh + 0.75 * fh * un * un
        else:
            edge = -0.55 * fh + 0.68 * fh * un * un
        d = np.maximum(cap, (v - edge) * np.float32(0.8))
        if style == "bun":
            d = np.minimum(d, circle(u, v + np.float32(1.02 * fh), 0.42 * fw))
        if style == "long":
            for side in (-1.0, 1.0):
                lock = capsule(v - np.float32(0.35 * fh), u - np.float32(side * 1.1 * fw), 0.5 * fh, 0.2 * fw)
                d = np.minimum(d, lock)
        self.cv.fill(p, d, self.id.hair)
        if style == "long" and self.detail:
            q = self._patch(0.25 * fw, -0.75 * fh, 0.35 * fw, 0.05 * fw, 0.2 * fh)
            if q is not None:
                part = capsule(q.v, q.u, 0.18 * fh, 0.012 * fw)
                self.cv.fill(q, part, _shade(self.id.hair, 0.7))

    def _nose(self) -> None:
        fw, fh, k = self.fw, self.fh, self.id.nose_size
        p = self._patch(0.0, 0.22 * fh, 0.95 * fw, 0.16 * fw * k, 0.1 * fw * k)
        if p is None:
            return
        shadow = ellipse(p.u, p.v, 0.1 * fw * k, 0.05 * fw * k)
        self.cv.fill(p, shadow, _shade(self.id.skin, 0.8), feather=0.02)
        for side in (-1.0, 1.0) if self.detail else ():
            nu = p.u - np.float32(side * 0.05 * fw * k)
            nostril = ellipse(nu, p.v - np.float32(0.015 * fw), 0.025 * fw * k, 0.014 * fw * k)
            self.cv.fill(p, nostril, _shade(self.id.skin, 0.45), opacity=0.7)

    def _eye(self, side: float) -> None:
        fw, fh, s = self.fw, self.fh, self.s
        a = 0.145 * fw * self.id.eye_size
        b_open = 0.62 * a
        b = max(b_open * (1.0 - min(max(s.blink, 0.0), 1.0)), 0.002)
        p = self._patch(side * self.id.eye_spacing * fw, -0.08 * fh, 0.75 * fw, 1.1 * a, 1.1 * a)
        if p is None:
            return
        u, v = p.u, p.v
        eye = ellipse(u, v, a, b)
        self.cv.fill(p, eye, SCLERA)
        ri = 0.5 * a
        iu = u - np.float32(s.gaze_x * 0.35 * a)
        iv = v - np.float32(s.gaze_y * 0.25 * b_open)
        self.cv.fill(p, np.maximum(circle(iu, iv, ri), eye), self.id.eye_colour)
        if self.detail:
            self.cv.fill(p, np.maximum(circle(iu, iv, 0.45 * ri), eye), PUPIL)
        if self.detail:
            glint = circle(iu + np.float32(0.3 * ri), iv + np.float32(0.35 * ri), 0.2 * ri)
            self.cv.fill(p, np.maximum(glint, eye), (1.0, 1.0, 1.0), 0.85)
        lid = np.maximum(np.abs(eye) - np.float32(0.06 * a), v - np.float32(0.3 * b))
        self.cv.fill(p, lid, LASH)

    def _brow(self, side: float) -> None:
        fw, fh, s, ident = self.fw, self.fh, self.s, self.id
        half = 0.17 * fw
        y = -0.27 * fh - 0.06 * fh * s.brow
        p = self._patch(side * ident.eye_spacing * fw, y, 0.7 * fw, 1.3 * half, 0.6 * half)
        if p is None:
            return
        u, v = p.u, p.v
        tilt = np.float32(side * ident.brow_tilt)
        v = v - tilt * u
        t = np.minimum((u * np.float32(1.0 / half)) ** 2, 1.0)
        v = v + np.float32(0.28 * half * ident.brow_arch) * (1.0 - t)
        r = 0.028 * fw * ident.brow_thickness
        outer = np.minimum(np.maximum(u * np.float32(side / half), 0.0), 1.0)
        taper = np.float32(r) - np.float32(0.35 * r) * outer  # brows thin towards the temples
        d = capsule(u, v, half, 0.0) - taper
        self.cv.fill(p, d, ident.brow_colour)

    def _mouth(self) -> None:
        fw, fh, s, ident = self.fw, self.fh, self.s, self.id
        o = min(max(s.openness, 0.0), 1.0)
        mw = 0.3 * fw * ident.mouth_width * (1.0 + 0.25 * s.wide - 0.45 * s.rounded + 0.08 * s.closed)
        oh = 0.13 * fh * o * (1.0 + 0.3 * s.rounded - 0.45 * s.wide)
        press = 1.0 - 0.35 * s.closed + 0.3 * s.rounded
        lu, ll = 0.03 * fh * press, 0.042 * fh * press
        y = 0.5 * fh + 0.06 * fh * o
        ex, ey = mw + 0.05 * fw, oh + ll + 0.01
        p = self._patch(0.0, y, 0.8 * fw, ex, ey)
        if p is None:
            return
        u, v = p.u, p.v
        outer = ellipse(u, v - np.float32(0.5 * (ll - lu)), mw + 0.035 * fw, oh + 0.5 * (lu + ll))
        self.cv.fill(p, outer, ident.lip)
        seam = max(oh, 0.0025 * fh)
        inside = ellipse(u, v, mw, seam)
        # The closed seam darkens smoothly into the open interior: no pop as the lips part.
        self.cv.fill(p, inside, _mix(_shade(ident.lip, 0.45), MOUTH_INSIDE, min(o / 0.1, 1.0)))
        if oh <= 0.0:
            return
        teeth_h = np.float32(min(0.5 * oh, 0.045 * fh))
        au = np.abs(u) - np.float32(0.78 * mw)
        upper = np.maximum(np.maximum(inside, v + np.float32(oh) - teeth_h), au)
        self.cv.fill(p, upper, TEETH)
        tongue = np.maximum(ellipse(u, v - np.float32(0.85 * oh), 0.6 * mw, 0.45 * oh), inside)
        self.cv.fill(p, tongue, TONGUE)

    def _glasses(self) -> None:
        fw, fh, ident = self.fw, self.fh, self.id
        ex = ident.eye_spacing * fw
        p = self._patch(0.0, -0.08 * fh, 0.75 * fw, 1.02 * fw, 0.2 * fw)
        if p is None:
            return
        u, v = p.u, p.v
        a, b, t = 0.21 * fw * ident.eye_size**0.5, 0.15 * fw, 0.018 * fw
        lens = np.minimum(ellipse(u - np.float32(ex), v, a, b), ellipse(u + np.float32(ex), v, a, b))
        self.cv.fill(p, lens, (0.85, 0.92, 1.0), opacity=0.15)
        frame = np.abs(lens) - np.float32(t)
        bridge = capsule(u, v + np.float32(0.03 * fw), max(ex - a, 0.01 * fw), t)
        arms = capsule(
            np.abs(u) - np.float32(ex + a + 0.5 * (fw - ex - a)),
            v + np.float32(0.04 * fw),
            0.5 * max(fw - ex - a, 0.0),
            t,
        )
        self.cv.fill(p, np.minimum(np.minimum(frame, bridge), arms), ident.accessory_colour)

    def _earrings(self) -> None:
        fw, fh = self.fw, self.fh
        for side in (-1.0, 1.0):
            p = self._patch(side * 0.98 * fw, 0.22 * fh, 0.0, 0.06 * fw, 0.1 * fw)
            if p is None:
                continue
            d = np.minimum(circle(p.u, p.v, 0.028 * fw), circle(p.u, p.v - np.float32(0.06 * fw), 0.045 * fw))
            self.cv.fill(p, d, self.id.accessory_colour)
            if self.detail:
                shine = circle(p.u + np.float32(0.015 * fw), p.v - np.float32(0.045 * fw), 0.012 * fw)
                self.cv.fill(p, shine, (1.0, 1.0, 1.0), 0.6)
