"""Animate a face photo by warping its own pixels: ``PhotoRig.from_photo(crop, face).render(motion)``.

Per frame, ``FaceMotion`` displaces the landmarks (the lower lip, chin and jaw drop by
``jaw_open`` times a mouth-height scale taken from the face; the lip corners move out or
in with ``mouth_width``; the upper lids close onto the lower lids with ``blink``; the head
turns rigidly in 3-D with the landmarks' own depth for yaw/pitch/roll and shifts by
tx/ty). Two rings of control points around the face oval carry part of the head motion
(the inner ring) and none of it (the outer ring), so the neck, hair edge and shoulders
stretch smoothly and everything beyond the outer ring stays the photo's own pixels.

The backward warp is piecewise affine over a fixed triangulation of those points plus the
frame border (Delaunay, computed once on the mouth-open configuration so that the lip
gap has triangles of its own). Each frame it is evaluated on a 2-pixel grid by locating
every grid point in the displaced mesh (a vectorised walk from its triangle at rest),
upsampled, and applied with ``cv2.remap``; then the mouth interior (a shaded dark cavity
with a band of teeth under the upper lip and, opened wider, above the lower lip) is
painted between the displaced inner lip contours through a feathered mask. A photo that
shows its teeth keeps them: what lay between its lips at rest hangs from the moving upper
lip, column by column, in place of the painted upper teeth. Pixels the
motion leaves in place are copied, so a neutral motion returns the crop bit-exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.expression import PARTED, RELAX_CLOSE, lip_bases
from engine.face.footage import FootageMouth, MouthBank
from engine.face.landmarks import (
    FACE_OVAL,
    LEFT_BROW,
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
    RIGHT_BROW,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    RIGHT_LID_CREASE,
    UPPER_LIP_CENTER,
    Face,
)
from engine.face.mouth import MouthFrame, MouthInterior, press_line, smooth_contour
from engine.face.palette import mouth_palette
from engine.puppet import FaceState

JAW_SCALE = 0.42  # lip gap added at jaw_open = 1, as a fraction of the mouth width
WIDTH_SCALE = 0.16  # lip-corner travel at |mouth_width| = 1, as a fraction of half the mouth width
LID_TRAVEL = 0.95  # how far the upper lid goes towards the lower one at blink = 1
LOWER_LID_TRAVEL = 0.05
CREASE_FOLLOW = 0.8  # the lid skin above the lid follows it by this fraction (the closed lid shows skin)
INNER_RING, OUTER_RING = 1.18, 1.5  # rings around the face oval (scale about its centre)
INNER_RING_FOLLOW = 0.6  # share of the head motion the inner ring takes
# Openness read below this is a closed mouth: the motion reader reads ~0.0-0.12 on closed driver
# mouths, and a photo's lips must meet in silence.
CLOSED_BELOW = 0.1
# The warp is evaluated every GRID pixels and interpolated: at 4 instead of 2 a 512² frame costs
# 3.9 instead of 5.2 ms here, for the same held-out lip sync (r 0.908 / 0.909), upper-face SSIM
# (0.976) and seams (1.007 / 1.006) of the astronaut.
GRID = 4
DEPTH_SCALE = 0.6
# Closed lips keep this share of a rest gap between them: the mesh's triangles there keep an area.
CLOSE_MAX = 0.96
GAP_FRINGE = 0.04  # mouth widths around a parted photo's inner lips filled with lip (``_lips_over_gap``)
REST_LINE = 0.5  # how dark the line between lips closed at rest shows (a press is 1)
JAW_RISE = 0.8  # the share of a wide rest gap (a mouth open in the photo) that the jaw closes
TEETH_JAW_FOLLOW = 0.8  # the lower teeth drop this fraction of the lower lip's drop (the lip drops further)
TEETH_BEHIND_LIPS = 0.12  # the teeth's front, behind the lips, in mouth widths (~6 mm)
HEAD_MOTION = ("yaw", "pitch", "roll", "tx", "ty")
CHIN_FOLLOW = 0.7  # the chin drops this fraction of the lower lip's drop
RING_JAW_FOLLOW = 0.6  # the inner ring below the chin drops this fraction of the chin's drop
MIN_SPACING = 0.022  # mesh landmarks besides the contours, at least this far apart (fraction of the frame)
# A face that fills the photo, or is cut by its edge: landmarks within ``EDGE_INSET`` pixels of the
# frame's edge are left out of the mesh, the outer ring's points within ``EDGE_BAND`` of it too, and
# the frame's border points follow the motion near them outwards only (never inwards, where they
# would leave a strip of the frame with nothing of the photo to show). Every pixel is then drawn
# from inside the photo, and the chin can drop out of the frame without folding the mesh.
EDGE_INSET = 3.0
EDGE_BAND = 0.06  # fraction of the frame
BORDER_POINTS = 17  # per side
BORDER_REACH = 0.08  # how far (fraction of the frame) a control point's motion carries to the border
# Contours always in the mesh: lips, lids, the lid skin above them, brows, the face oval, the nose tip.
CONTOURS = tuple(
    dict.fromkeys(
        LIPS_OUTER_UPPER + LIPS_OUTER_LOWER + LIPS_INNER_UPPER + LIPS_INNER_LOWER + RIGHT_EYE_UPPER
        + RIGHT_EYE_LOWER + LEFT_EYE_UPPER + LEFT_EYE_LOWER + RIGHT_LID_CREASE + LEFT_LID_CREASE + RIGHT_BROW
        + LEFT_BROW + FACE_OVAL + (1,)
    )
)


@dataclass(frozen=True)
class FaceMotion:
    """One frame of face motion; all zero is the photo at rest.

    jaw_open in [0, 1] (1: a wide-open "aa"), mouth_width in [-1, 1] (rounded "oo" ..
    wide "ee"), blink in [0, 1] (1: closed), yaw/pitch/roll in radians (small, |a| < 0.3;
    positive yaw moves the nose towards image +x, positive pitch moves it down, positive
    roll turns the head clockwise on screen), tx/ty as fractions of the frame size.
    """

    jaw_open: float = 0.0  # lips apart, 0 .. 1
    mouth_width: float = 0.0  # -1 rounded .. 1 wide
    blink: float = 0.0  # 0 open .. 1 closed
    yaw: float = 0.0  # radians
    pitch: float = 0.0  # radians
    roll: float = 0.0  # radians
    tx: float = 0.0  # fraction of the frame width
    ty: float = 0.0  # fraction of the frame height
    press: float = 0.0  # 0 .. 1: the lips meet and press (p, b, m)
    talking: float = 0.0  # 0 .. 1: how much the face is speaking now (a posed smile eases)


def _clip(v: float, lo: float, hi: float) -> float:
    return float(min(max(float(v), lo), hi))


def _smoothstep(x: np.ndarray | float) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3 - 2 * x)


def _mesh_subset(xy: np.ndarray, spacing: float, size: int) -> np.ndarray:
    """Indices of the landmarks the warp mesh uses: the contours, then others at least ``spacing``
    apart; only those inside the frame (a face cut by the photo's edge keeps what it shows)."""
    inside = ((xy >= EDGE_INSET) & (xy <= size - 1 - EDGE_INSET)).all(1)
    keep = [i for i in CONTOURS if inside[i]]
    chosen = xy[keep]
    for i in range(len(xy)):
        if i in keep or not inside[i]:
            continue
        if np.min(np.linalg.norm(chosen - xy[i], axis=1)) >= spacing:
            keep.append(i)
            chosen = np.vstack([chosen, xy[i]])
    return np.array(keep, np.int32)


def _outward(border: np.ndarray, size: int) -> np.ndarray:
    """(B, 2) the outward direction of each border point of a frame (diagonal at the corners)."""
    out = np.zeros_like(border)
    out[:, 0] = np.where(border[:, 0] <= 0, -1.0, np.where(border[:, 0] >= size - 1, 1.0, 0.0))
    out[:, 1] = np.where(border[:, 1] <= 0, -1.0, np.where(border[:, 1] >= size - 1, 1.0, 0.0))
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _delaunay(points: np.ndarray, size: int) -> np.ndarray:
    """(T, 3) vertex indices of the Delaunay triangulation of distinct points, in or near the frame."""
    sub = cv2.Subdiv2D((-size, -size, 3 * size, 3 * size))
    for p in points:
        sub.insert((float(p[0]), float(p[1])))
    tris = sub.getTriangleList().reshape(-1, 3, 2)
    d = ((tris[:, :, None, :] - points[None, None, :, :].astype(np.float32)) ** 2).sum(-1)
    idx = d.argmin(-1)
    ok = (np.take_along_axis(d, idx[..., None], -1)[..., 0] < 1e-4).all(1)
    idx = idx[ok]
    # Counter-clockwise in image coordinates (y down) for a consistent barycentric sign.
    p = points[idx]
    flip = _signed_areas(p) < 0
    idx[flip] = idx[flip][:, [0, 2, 1]]
    return idx.astype(np.int32)


def _signed_areas(p: np.ndarray) -> np.ndarray:
    """Twice the signed area of each (T, 3, 2) triangle (positive: counter-clockwise with y down)."""
    return (p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1]) - (p[:, 1, 1] - p[:, 0, 1]) * (p[:, 2, 0] - p[:, 0, 0])


def _lip_ladder(tris: np.ndarray, points: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``tris`` with the lip gap re-triangulated as a ladder between facing inner-lip points
    (upper i, lower i): lips that close bring each pair together, and a ladder's rungs then
    shrink to nothing without any triangle turning over (Delaunay's diagonals across the gap
    would)."""
    where = {int(k): i for i, k in enumerate(keep)}
    up = [where[k] for k in LIPS_INNER_UPPER]
    lo = [where[k] for k in LIPS_INNER_LOWER]
    gap = np.concatenate([points[up], points[lo][::-1]]).astype(np.float32)
    inner = set(up + lo)
    keep_tri = []
    for tri in tris:
        centre = points[tri].mean(0)
        inside = cv2.pointPolygonTest(gap, (float(centre[0]), float(centre[1])), False) > 0
        keep_tri.append(not (inside and all(int(v) in inner for v in tri)))
    ladder = []
    for i in range(len(up) - 1):
        for tri in ((up[i], up[i + 1], lo[i + 1]), (up[i], lo[i + 1], lo[i])):
            if len(set(tri)) == 3:
                ladder.append(tri)
    out = np.concatenate([tris[np.array(keep_tri)], np.array(ladder, np.int32)])
    flip = _signed_areas(points[out]) < 0
    out[flip] = out[flip][:, [0, 2, 1]]
    return out.astype(np.int32)


def _neighbours(tris: np.ndarray) -> np.ndarray:
    """(T, 3): the triangle across the edge opposite each vertex, -1 on the hull."""
    edges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for t, (a, b, c) in enumerate(tris.tolist()):
        for k, (u, v) in enumerate(((b, c), (c, a), (a, b))):
            edges.setdefault((min(u, v), max(u, v)), []).append((t, k))
    nbr = np.full(tris.shape, -1, np.int32)
    for owners in edges.values():
        if len(owners) == 2:
            (t0, k0), (t1, k1) = owners
            nbr[t0, k0], nbr[t1, k1] = t1, t0
    return nbr


def _affines(tris: np.ndarray, dst: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per triangle: (T, 3, 3) dst pixel -> barycentric weights, (T, 2, 3) dst pixel -> src pixel."""
    a, b, c = dst[tris[:, 0]], dst[tris[:, 1]], dst[tris[:, 2]]
    e1, e2 = b - a, c - a
    den = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    den = np.where(np.abs(den) < 1e-9, 1e-9, den)
    # l1 = (e2y (x-ax) - e2x (y-ay)) / den ; l2 = (-e1y (x-ax) + e1x (y-ay)) / den
    bary = np.zeros((len(tris), 3, 3), np.float64)
    bary[:, 1, 0], bary[:, 1, 1] = e2[:, 1] / den, -e2[:, 0] / den
    bary[:, 1, 2] = -(bary[:, 1, 0] * a[:, 0] + bary[:, 1, 1] * a[:, 1])
    bary[:, 2, 0], bary[:, 2, 1] = -e1[:, 1] / den, e1[:, 0] / den
    bary[:, 2, 2] = -(bary[:, 2, 0] * a[:, 0] + bary[:, 2, 1] * a[:, 1])
    bary[:, 0] = -bary[:, 1] - bary[:, 2]
    bary[:, 0, 2] += 1.0
    s = src[tris]  # (T, 3, 2)
    aff = np.einsum("tkd,tkj->tdj", s, bary)  # src = sum_k l_k s_k
    return bary.astype(np.float32), aff.astype(np.float32)


def photo_motion(state: FaceState, talking: float = 0.0) -> FaceMotion:
    """The photo's motion for a face state read off a driver face: openness below ``CLOSED_BELOW``
    closes the lips (pressed, while talking), the rest spans the jaw's travel; the head pose is
    taken as it is; ``talking`` (the speech envelope) eases a posed smile."""
    talking = _clip(talking, 0.0, 1.0)
    return FaceMotion(jaw_open=min(max((state.openness - CLOSED_BELOW) / (1.0 - CLOSED_BELOW), 0.0), 1.0),
                      mouth_width=min(max(state.wide - state.rounded, -1.0), 1.0),
                      blink=min(max(state.blink, 0.0), 1.0),
                      yaw=state.yaw, pitch=state.pitch, roll=state.roll, tx=state.tx, ty=state.ty,
                      press=talking * _clip(1.0 - state.openness / CLOSED_BELOW, 0.0, 1.0), talking=talking)


class PhotoRig:
    """A face photo (a crop from ``crop_face``) prepared for animation; ``render(motion)`` per frame."""

    def __init__(self, image: np.ndarray, face: Face, mouths: MouthBank | None = None, sway: float = 1.0):
        image = np.ascontiguousarray(image)
        if image.ndim != 3 or image.shape[0] != image.shape[1] or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected a square (S, S, 3) uint8 image, got {image.dtype} {image.shape}")
        self.image = image
        self.size = s = image.shape[0]
        lm = face.landmarks.astype(np.float64)
        self.face = face
        self._lm = lm
        xy = lm[:, :2]
        # Face frame: u along the eye line, v down the face; F = eye line to chin.
        reye = xy[list(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER)].mean(0)
        leye = xy[list(LEFT_EYE_UPPER + LEFT_EYE_LOWER)].mean(0)
        eu = (leye - reye) / max(np.linalg.norm(leye - reye), 1e-6)
        ev = np.array([-eu[1], eu[0]])
        self._eu, self._ev = eu, ev
        mc = xy[list(LIPS_INNER_UPPER + LIPS_INNER_LOWER)].mean(0)
        mouth_w = float(np.linalg.norm(xy[MOUTH_CORNERS[1]] - xy[MOUTH_CORNERS[0]]))
        self.mouth_width_px = mouth_w
        hw = mouth_w / 2
        self.face_center = xy[list(FACE_OVAL)].mean(0)
        # Depth for the head turn: the landmarks' own z, flattened about half-way to the face
        # plane (a 2-D warp cannot show what a full turn would hide).
        # The oval's far sides are clamped to its median depth so that they do not fold over the cheeks.
        z_plane = float(np.median(lm[list(FACE_OVAL), 2]))
        self._depth = DEPTH_SCALE * (np.minimum(lm[:, 2], z_plane) - 0.5 * z_plane)
        self.pivot = np.array([*self.face_center, 0.0])

        # Expression bases (per landmark, (N, 2) pixels at full strength), about the face at rest: the
        # photo's own landmarks, or, where its lips are apart (a photo taken mid-word, a smile on its
        # teeth), those lips brought together, so silence and "p", "b", "m" close on every photo.
        self._rest = self._closed_rest(xy, mc, eu, ev, mouth_w)
        rest_xy = xy + self._rest
        rest_mc = rest_xy[list(LIPS_INNER_UPPER + LIPS_INNER_LOWER)].mean(0)
        rel = rest_xy - rest_mc
        u, v = rel @ eu, rel @ ev
        self._jaw = self._jaw_basis(rest_xy, u, v, hw) * (JAW_SCALE * mouth_w)
        width = np.zeros((NUM_LANDMARKS, 2))
        wgt = np.exp(-((u / (1.6 * hw)) ** 2 + (v / (0.9 * hw)) ** 2))
        width += (WIDTH_SCALE * u * wgt)[:, None] * eu
        self._width = width
        self._blink = self._blink_basis(xy)
        self.lips = lip_bases(rest_xy, rest_mc, eu, ev, mouth_w)

        # Rings around the oval and the frame border.
        oval = xy[list(FACE_OVAL)]
        oc = oval.mean(0)
        ring1 = oc + INNER_RING * (oval - oc)
        ring2 = oc + OUTER_RING * (oval - oc)
        k = np.linspace(0, s - 1, BORDER_POINTS)
        border = np.array(
            [(x, 0) for x in k] + [(x, s - 1) for x in k] + [(0, y) for y in k[1:-1]] + [(s - 1, y) for y in k[1:-1]],
            np.float64,
        )
        inside2 = ((ring2 > EDGE_BAND * s) & (ring2 < (1 - EDGE_BAND) * s)).all(1)
        ring2 = ring2[inside2]
        in_frame = ((ring1 >= EDGE_INSET) & (ring1 <= s - 1 - EDGE_INSET)).all(1)
        ring1, ring1_oval = ring1[in_frame], np.array(FACE_OVAL)[in_frame]
        self._keep = _mesh_subset(xy, MIN_SPACING * self.size, s)
        pts = np.concatenate([xy[self._keep], ring1, ring2, border])
        self._src = pts
        self._n_lm = n_lm = len(self._keep)
        self._n_moving = n_lm + len(ring1)
        self._n_border = len(border)
        self._outward = _outward(border, s)
        d2 = ((border[:, None, :] - pts[None, : self._n_moving]) ** 2).sum(-1)
        weights = np.exp(-d2 / (BORDER_REACH * s) ** 2)
        weights = np.where(weights < 0.01, 0.0, weights)  # beyond reach: fixed
        self._near_border = np.flatnonzero(weights.any(0))  # the moving points within reach of the border
        self._border_weights = weights[:, self._near_border]
        # Ring 1 takes part of the jaw drop of its oval point (the neck stretches).
        self._ring1_jaw = RING_JAW_FOLLOW * self._jaw[ring1_oval]
        self._ring1_z = self._depth[ring1_oval]

        opened = pts.copy()
        opened[:n_lm] += self._rest[self._keep] + self._jaw[self._keep]
        opened[n_lm : self._n_moving] += self._ring1_jaw
        opened = self._follow(opened)
        self.triangles = _lip_ladder(_delaunay(opened, s), opened, self._keep)
        self._nbr = _neighbours(self.triangles)
        lips = np.flatnonzero(np.isin(self._keep, LIPS_INNER_UPPER + LIPS_INNER_LOWER + LIPS_OUTER_UPPER
                                      + LIPS_OUTER_LOWER))
        self._lip_triangles = self.triangles[np.isin(self.triangles, lips).any(1)]
        self._rest = self._unfolded(self._rest)
        # Each grid point's triangle at rest.
        g = np.arange(0, s - 1 + GRID, GRID, dtype=np.float32)  # the last point at or past the last pixel
        self._grid = g
        gy, gx = np.meshgrid(g, g, indexing="ij")
        # The map is evaluated at grid points clamped to the last pixel: none samples past the frame.
        self._gx, self._gy = np.minimum(gx, s - 1), np.minimum(gy, s - 1)
        raster = np.zeros(gx.shape, np.int32)
        for t, tri in enumerate(np.round(pts[self.triangles] / GRID * 16).astype(np.int32)):
            cv2.fillConvexPoly(raster, tri, t, cv2.LINE_8, 4)
        bary, _ = _affines(self.triangles, pts, pts)
        self._rest_tri = self._locate(bary, self._gx.ravel(), self._gy.ravel(), raster.ravel()).reshape(gx.shape)
        region = np.zeros((s, s), np.uint8)
        can_move = np.arange(len(pts)) < self._n_moving
        can_move[-self._n_border :] = self._border_weights.any(1)
        active = can_move[self.triangles].any(1)
        for tri in np.round(pts[self.triangles[active]] * 16).astype(np.int32):
            cv2.fillConvexPoly(region, tri, 1, cv2.LINE_8, 4)
        # The map is interpolated between grid points: a moving triangle's warp reaches GRID - 1 px past it.
        self.motion_region = cv2.dilate(region, np.ones((2 * GRID - 1,) * 2, np.uint8)).astype(bool)
        """(S, S) bool: the only pixels any motion can change (the triangles with a moving corner)."""
        self.palette = mouth_palette(image, lm)
        self._warped = _lips_over_gap(image, xy, mouth_w) if self._rest.any() else image
        drawn = MouthInterior(image, lm, MouthFrame(mc, eu, ev, mouth_w), self.palette)
        self.mouth: MouthInterior | FootageMouth = drawn if mouths is None else FootageMouth(mouths, drawn)
        self.sway = float(sway)
        self._teeth_depth = float(self._depth[UPPER_LIP_CENTER]) + DEPTH_SCALE * TEETH_BEHIND_LIPS * mouth_w

    # ---- bases -------------------------------------------------------------------------------------------------
    def _jaw_basis(self, xy: np.ndarray, u: np.ndarray, v: np.ndarray, hw: float) -> np.ndarray:
        """(N, 2) jaw-drop direction times weight (lower lip centre = 1)."""
        up = np.array(LIPS_INNER_UPPER)
        lo = np.array(LIPS_INNER_LOWER)
        seam_u = (u[up] + u[lo]) / 2
        seam_v = (v[up] + v[lo]) / 2
        order = np.argsort(seam_u)
        v_seam = np.interp(u, seam_u[order], seam_v[order])
        chin_v = float(v[list(FACE_OVAL)].max())
        band = 0.01 * chin_v + 0.3 * chin_v * _smoothstep((np.abs(u) - 0.7 * hw) / (0.9 * hw))
        m = _smoothstep(0.5 + (v - v_seam) / np.maximum(band, 1e-3))
        m[list(LIPS_OUTER_UPPER + LIPS_INNER_UPPER)] = 0.0
        m[list(LIPS_OUTER_LOWER + LIPS_INNER_LOWER)] = 1.0
        m[list(MOUTH_CORNERS) + [78, 308]] = 0.5
        g = np.exp(-((u / (1.5 * hw)) ** 2))
        # The lips part more than the chin drops: the weight eases from the lower lip to the chin.
        v_lip = float(v[LOWER_LIP_CENTER])
        g *= 1.0 - (1.0 - CHIN_FOLLOW) * _smoothstep((v - v_lip) / max(chin_v - v_lip, 1e-3))
        w = m * g
        w /= max(w[LOWER_LIP_CENTER], 1e-6)
        return w[:, None] * self._ev

    def _closed_rest(self, xy: np.ndarray, mc: np.ndarray, eu: np.ndarray, ev: np.ndarray,
                     mouth_w: float) -> np.ndarray:
        """(468, 2) offsets that bring lips apart in the photo together (zero where they meet): the
        jaw rises to close most of a wide gap (a mouth open mid-word), the inner lips then meet pair
        by pair (all of a smile's narrow gap); what lay between them is kept behind the lips and shows
        again when the mouth opens."""
        rel = xy - mc
        u, v = rel @ eu, rel @ ev
        up, lo = xy[UPPER_LIP_CENTER], xy[LOWER_LIP_CENTER]
        gap = float((lo - up) @ ev)
        if gap <= PARTED * mouth_w:
            return np.zeros_like(xy)
        rise = JAW_RISE * float(_smoothstep((gap / mouth_w - 0.05) / 0.15)) * gap
        raised = -rise * self._jaw_basis(xy, u, v, mouth_w / 2)
        closed = lip_bases(xy + raised, mc, eu, ev, mouth_w).close
        return raised + CLOSE_MAX * closed

    def _unfolded(self, rest: np.ndarray) -> np.ndarray:
        """The closed rest, backed off point by point where it would turn a triangle of the mesh over
        (towards the corners of a wide-open mouth, whose lips then meet a little less)."""
        if not rest.any():
            return rest
        scale = np.ones(NUM_LANDMARKS)
        for _ in range(40):
            pts = self._src.copy()
            pts[: self._n_lm] += (scale[:, None] * rest)[self._keep]
            bad = self.triangles[_signed_areas(pts[self.triangles]) <= 0]
            corners = np.unique(bad[bad < self._n_lm])
            if corners.size == 0:
                break
            scale[self._keep[corners]] *= 0.85
        return scale[:, None] * rest

    def _blink_basis(self, xy: np.ndarray) -> np.ndarray:
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

    # ---- per frame ---------------------------------------------------------------------------------------------
    def moved_landmarks(self, motion: FaceMotion) -> np.ndarray:
        """(468, 2) landmark positions for ``motion``."""
        return self._move(motion)[0]

    def _lip_offsets(self, m: FaceMotion) -> tuple[np.ndarray, float]:
        """(468, 2) rest-frame landmark offsets of the expression, and how far the lips close
        (backed off where closing a smile's gap would fold the mesh between the lips)."""
        jaw, width, blink = _clip(m.jaw_open, 0, 1), _clip(m.mouth_width, -1, 1), _clip(m.blink, 0, 1)
        press, talking = _clip(m.press, 0, 1), _clip(m.talking, 0, 1)
        base = (jaw * self._jaw + width * self._width + blink * self._blink + press * self.lips.press
                + talking * self.lips.relax)
        close = min(press + talking * RELAX_CLOSE * self.lips.smile, CLOSE_MAX)
        for _ in range(16):
            offsets = base + close * self.lips.close
            if close == 0 or not self._folds(offsets, jaw):
                return offsets, close
            close *= 0.93
        return base, 0.0

    def _folds(self, offsets: np.ndarray, jaw: float) -> bool:
        pts = self._src.copy()
        pts[: self._n_lm] += (self._rest + offsets)[self._keep]
        pts[self._n_lm : self._n_moving] += jaw * self._ring1_jaw
        return bool((_signed_areas(pts[self._lip_triangles]) <= 0).any())

    def _move(self, motion: FaceMotion) -> tuple[np.ndarray, np.ndarray, float]:
        """(468, 2) landmarks, (P, 2) control points (mesh landmarks, rings, border) and the lips'
        closing for ``motion``."""
        m = motion
        jaw = _clip(m.jaw_open, 0, 1)
        pts = self._src.copy()
        n, n1 = self._n_lm, self._n_moving
        lm = self._lm.copy()
        offsets, close = self._lip_offsets(m)
        lm[:, :2] += self._rest + offsets
        lm[:, 2] = self._depth
        if m.yaw or m.pitch or m.roll or m.tx or m.ty:
            lm = self._turn(lm, m)
            ring = np.concatenate([pts[n:n1], self._ring1_z[:, None]], axis=1)
            pts[n:n1] += INNER_RING_FOLLOW * (self._turn(ring, m) - ring[:, :2])
        else:
            lm = lm[:, :2]
        pts[:n] = lm[self._keep]
        pts[n:n1] += jaw * self._ring1_jaw
        return lm, self._follow(pts), close

    def _follow(self, pts: np.ndarray) -> np.ndarray:
        """``pts`` with the frame's border points moved outwards with the motion near them (the
        largest outward motion of the control points within reach, by weight)."""
        near = self._near_border
        d = pts[near] - self._src[near]
        if not np.abs(d).max(initial=0.0) > 1e-6:
            return pts
        out = self._outward @ d.T  # outward motion of each point near the border, per border point
        push = (self._border_weights * np.maximum(out, 0.0)).max(1)
        pts[-self._n_border :] = self._src[-self._n_border :] + push[:, None] * self._outward
        return pts

    def displaced(self, motion: FaceMotion) -> np.ndarray:
        """(P, 2) control point positions for ``motion`` (mesh landmarks first, then the rings and border)."""
        return self._move(motion)[1]

    def _locate(self, bary: np.ndarray, qx: np.ndarray, qy: np.ndarray, start: np.ndarray) -> np.ndarray:
        """The triangle holding each query point (``bary``: the moved mesh's ``_affines``), walking from ``start``."""
        t = start.astype(np.int32).copy()
        todo = np.arange(len(t))
        for _ in range(64):
            if todo.size == 0:
                break
            b = bary[t[todo]]  # (n, 3, 3)
            lam = b[:, :, 0] * qx[todo, None] + b[:, :, 1] * qy[todo, None] + b[:, :, 2]
            worst = lam.argmin(1)
            out = lam[np.arange(len(todo)), worst] < -1e-4
            nxt = self._nbr[t[todo[out]], worst[out]]
            ok = nxt >= 0
            moving = todo[out][ok]
            t[moving] = nxt[ok]
            todo = moving
        return t

    def _warp_block(self, dst: np.ndarray) -> tuple[int, int, int, int, np.ndarray, np.ndarray] | None:
        """The pixel block the moved mesh touches and its (h, w) float32 source maps; None if nothing moves."""
        moved = np.abs(dst - self._src).max(1) > 1e-6
        if not moved.any():
            return None
        active = moved[self.triangles].any(1)
        tris = self.triangles[active]
        corners = np.concatenate([dst[tris].reshape(-1, 2), self._src[tris].reshape(-1, 2)])
        lo = np.clip(np.floor(corners.min(0)), 0, self.size - 1).astype(int)
        hi = np.clip(np.ceil(corners.max(0)), 0, self.size - 1).astype(int)
        gx0, gy0 = lo // GRID
        gx1 = min(-(-int(hi[0]) // GRID) + 1, len(self._grid))
        gy1 = min(-(-int(hi[1]) // GRID) + 1, len(self._grid))
        qx = self._gx[gy0:gy1, gx0:gx1]
        qy = self._gy[gy0:gy1, gx0:gx1]
        # A point whose triangle at rest keeps all three corners still is inside it now too (the
        # mesh does not fold); only the others are looked up.
        rest = self._rest_tri[gy0:gy1, gx0:gx1].ravel()
        tri = rest.copy()
        look = np.flatnonzero(active[rest])
        bary, aff = _affines(self.triangles, dst, self._src)
        if look.size:
            lx, ly = qx.ravel()[look], qy.ravel()[look]
            tri[look] = self._locate(bary, lx, ly, self._start(dst, moved, lx, ly, rest[look]))
        a = aff[tri]
        fx, fy = qx.ravel(), qy.ravel()
        mx = a[:, 0, 0] * fx + a[:, 0, 1] * fy + a[:, 0, 2]
        my = a[:, 1, 0] * fx + a[:, 1, 1] * fy + a[:, 1, 2]
        if look.size:  # a point the walk left outside its triangle (a fold): the triangle's nearest source
            lam = np.einsum("nkj,nj->nk", bary[tri[look]], np.stack([fx[look], fy[look], np.ones(look.size)], 1))
            off = lam.min(1) < -1e-3
            if off.any():
                w = np.clip(lam[off], 0.0, None)
                w /= np.maximum(w.sum(1, keepdims=True), 1e-9)
                src = np.einsum("nk,nkd->nd", w, self._src[self.triangles[tri[look[off]]]])
                mx[look[off]], my[look[off]] = src[:, 0], src[:, 1]
        mx, my = mx.reshape(qx.shape), my.reshape(qx.shape)
        x0, y0 = gx0 * GRID, gy0 * GRID
        x1 = min(int(self._grid[gx1 - 1]) + 1, self.size)
        y1 = min(int(self._grid[gy1 - 1]) + 1, self.size)
        up = np.array([[1.0 / GRID, 0, 0], [0, 1.0 / GRID, 0]])
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        bx = cv2.warpAffine(mx, up, (x1 - x0, y1 - y0), flags=flags, borderMode=cv2.BORDER_REPLICATE)
        by = cv2.warpAffine(my, up, (x1 - x0, y1 - y0), flags=flags, borderMode=cv2.BORDER_REPLICATE)
        return x0, y0, x1, y1, bx, by

    def _start(self, dst: np.ndarray, moved: np.ndarray, qx: np.ndarray, qy: np.ndarray, rest: np.ndarray):
        """Walk starts: each point's triangle at rest, looked up where the landmarks' mean affine motion
        takes it back from (most of a head turn or shift is then already accounted for)."""
        n = self._n_lm
        if moved[:n].sum() < 3:
            return rest
        a = np.concatenate([dst[:n], np.ones((n, 1))], axis=1)
        back, *_ = np.linalg.lstsq(a, self._src[:n], rcond=None)  # dst -> src, (3, 2)
        sx = qx * back[0, 0] + qy * back[1, 0] + back[2, 0]
        sy = qx * back[0, 1] + qy * back[1, 1] + back[2, 1]
        last = len(self._grid) - 1
        ix = np.clip(np.rint(sx / GRID), 0, last).astype(np.intp)
        iy = np.clip(np.rint(sy / GRID), 0, last).astype(np.intp)
        return self._rest_tri[iy, ix]

    def render(self, motion: FaceMotion) -> np.ndarray:
        """The (S, S, 3) uint8 frame for ``motion``."""
        lm, dst, close = self._move(motion)
        out = self.image.copy()
        block = self._warp_block(dst)
        if block is None:
            return out
        x0, y0, x1, y1, bx, by = block
        np.clip(bx, 0, self.size - 1, out=bx)  # the grid's last points lie a pixel or so past the edge
        np.clip(by, 0, self.size - 1, out=by)
        # Where the map is the identity (closer than remap's 1/32-pixel grid to a pixel centre), remap
        # returns the photo's own pixels exactly: what does not move needs no copying back.
        out[y0:y1, x0:x1] = cv2.remap(self._warped, bx, by, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        jaw = _clip(motion.jaw_open, 0, 1)
        press = _clip(motion.press, 0, 1)
        if jaw > 0 or (close > 0 and self.lips.parted):
            skull = self._head_affine(motion)
            drop = jaw * TEETH_JAW_FOLLOW * self._jaw[LOWER_LIP_CENTER]
            opening = float(_smoothstep(jaw / 0.12))
            # What a press leaves of a gap (a smile's own, closing): the lips meet there.
            meeting = min(press, close / CLOSE_MAX) * (1 - opening)
            self.mouth.paint(out, lm, skull, drop, max(opening, meeting), meeting)
        elif press > 0 or self._rest.any():  # lips that meet (in the photo, or at the closed rest): the
            press_line(out, lm, max(press, REST_LINE))  # line between them shows, deeper when pressed
        return out

    def source_map(self, motion: FaceMotion) -> np.ndarray:
        """(S, S, 2) float32: where in the photo crop each output pixel of ``motion`` is drawn from
        (x, y), before any clamping; the identity where nothing moves. A pixel whose source lies
        more than half a pixel outside the crop would be an invented one."""
        g = np.arange(self.size, dtype=np.float32)
        maps = np.stack(np.meshgrid(g, g, indexing="xy"), axis=-1)
        block = self._warp_block(self._move(motion)[1])
        if block is not None:
            x0, y0, x1, y1, bx, by = block
            maps[y0:y1, x0:x1, 0], maps[y0:y1, x0:x1, 1] = bx, by
        return maps

    def _head_affine(self, motion: FaceMotion) -> np.ndarray:
        """2x3: the photo's pixels to this frame's, for points at the teeth's depth (the head's turn and
        shift; the teeth hang from the upper lip, lowered a little where the rest closes the lips)."""
        f = self.mouth.frame
        rest = np.array([f.centre, f.centre + f.width * f.eu, f.centre + f.width * f.ev])
        hung = rest + self._rest[UPPER_LIP_CENTER]
        moved = self._turn(np.concatenate([hung, np.full((3, 1), self._teeth_depth)], 1), motion)
        return cv2.getAffineTransform(rest.astype(np.float32), moved.astype(np.float32)).astype(np.float64)

    def _turn(self, points: np.ndarray, motion: FaceMotion) -> np.ndarray:
        """(n, 2): (n, 3) rest points (x, y, depth) turned and shifted with the head."""
        yaw, pitch, roll = (_clip(a, -0.5, 0.5) for a in (motion.yaw, motion.pitch, motion.roll))
        shift = np.array([motion.tx, motion.ty]) * self.size
        return ((points - self.pivot) @ _rotation(yaw, pitch, roll).T + self.pivot)[:, :2] + shift

    def draw(self, state: FaceState, talking: float = 0.0) -> np.ndarray:
        """The frame for a face state read off a driver face (``engine.stages.redraw``'s drawer),
        the head's motion scaled by ``sway``."""
        motion = photo_motion(state, talking)
        if self.sway != 1.0:
            motion = dataclasses.replace(motion, **{k: self.sway * getattr(motion, k) for k in HEAD_MOTION})
        return self.render(motion)

    def render_many(self, motions: Iterable[FaceMotion]) -> np.ndarray:
        """(n, S, S, 3) uint8 frames."""
        frames = [self.render(m) for m in motions]
        if not frames:
            return np.zeros((0, self.size, self.size, 3), np.uint8)
        return np.stack(frames)

    @classmethod
    def from_photo(cls, image: np.ndarray, face: Face, mouths: MouthBank | None = None,
                   sway: float = 1.0) -> PhotoRig:
        """A rig for a square photo crop (``crop_face``) and its face (landmarks in crop pixels);
        ``mouths``: the person's own mouth from their footage, ``sway``: how much more or less than
        the driver they move their head (a personal avatar)."""
        return cls(image, face, mouths, sway)


def _lips_over_gap(image: np.ndarray, xy: np.ndarray, mouth_w: float) -> np.ndarray:
    """``image`` with what shows between its parted lips (and a fringe, where the mesh's inner-lip
    points fall short of the dark) filled in from the lips around it: the closed rest squeezes that
    strip to a line, which then shows lip, not a dark seam; an opening mouth paints its interior over
    it (the photo's own teeth come from the photo itself)."""
    gap = np.concatenate([smooth_contour(xy[list(LIPS_INNER_UPPER)]), smooth_contour(xy[list(LIPS_INNER_LOWER)])[::-1]])
    mask = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(gap).astype(np.int32)], 255, cv2.LINE_8)
    grow = max(int(round(GAP_FRINGE * mouth_w)), 1)
    mask = cv2.dilate(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    return cv2.inpaint(image, mask, grow + 2, cv2.INPAINT_TELEA)


def _rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """3x3 rotation of (x, y, z) image-space points (y down, z away from the camera)."""
    cy, sy = np.cos(yaw), np.sin(yaw)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cr, sr = np.cos(roll), np.sin(roll)
    # yaw about the image y axis: the nose (z < 0) moves towards +x for yaw > 0.
    ry = np.array([[cy, 0, -sy], [0, 1, 0], [sy, 0, cy]])
    # pitch about the x axis: the nose moves down (+y) for pitch > 0.
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]])
    return rz @ rx @ ry
