"""Animate a face photo by warping its own pixels: ``PhotoRig.from_photo(crop, face).render(motion)``.

Per frame, ``FaceMotion`` displaces the landmarks (the lower lip, chin and jaw drop by
``jaw_open`` times a mouth-height scale taken from the face; the lip corners move out or
in with ``mouth_width``; the upper lids close onto the lower lids with ``blink``; the head
turns rigidly in 3-D with the landmarks' own depth for yaw/pitch/roll and shifts by
tx/ty). Two rings of control points around the face oval carry part of the head motion
(the inner ring) and none of it (the outer ring), so the neck, hair edge and shoulders
stretch smoothly and everything beyond the outer ring stays the photo's own pixels.

The backward warp (``engine.face.warp_mesh``) is piecewise affine over a fixed triangulation
of those points plus the frame border (Delaunay, computed once on the mouth-open configuration
so that the lip gap has triangles of its own, the gap itself a ladder between facing lip points);
the motion's per-landmark bases are ``engine.face.motion_bases``; then the mouth interior (a shaded dark cavity
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

from engine.face.expression import RELAX_CLOSE
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
    NUM_LANDMARKS,
    RIGHT_BROW,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    RIGHT_LID_CREASE,
    UPPER_LIP_CENTER,
    Face,
)
from engine.face.motion_bases import CLOSE_MAX, JAW_SCALE, FaceAxes, MotionBases, motion_bases, smoothstep
from engine.face.mouth import MouthFrame, MouthInterior, press_line, smooth_contour
from engine.face.palette import mouth_palette
from engine.face.warp_mesh import BorderFollow, WarpMesh, delaunay, lip_ladder, signed_areas
from engine.puppet import FaceState

__all__ = ["HEARD_JAW", "JAW_SCALE", "READ_JAW", "FaceMotion", "JawMap", "PhotoRig", "photo_motion"]

INNER_RING, OUTER_RING = 1.18, 1.5  # rings around the face oval (scale about its centre)
INNER_RING_FOLLOW = 0.6  # share of the head motion the inner ring takes
DEPTH_SCALE = 0.6
GAP_FRINGE = 0.04  # mouth widths around a parted photo's inner lips filled with lip (``_lips_over_gap``)
REST_LINE = 0.5  # how dark the line between lips closed at rest shows (a press is 1)
TEETH_JAW_FOLLOW = 0.8  # the lower teeth drop this fraction of the lower lip's drop (the lip drops further)
TEETH_BEHIND_LIPS = 0.12  # the teeth's front, behind the lips, in mouth widths (~6 mm)
HEAD_MOTION = ("yaw", "pitch", "roll", "tx", "ty")
RING_JAW_FOLLOW = 0.6  # the inner ring below the chin drops this fraction of the chin's drop
MIN_SPACING = 0.022  # mesh landmarks besides the contours, at least this far apart (fraction of the frame)
# A face that fills the photo, or is cut by its edge: landmarks within ``EDGE_INSET`` pixels of the
# frame's edge are left out of the mesh, the outer ring's points within ``EDGE_BAND`` of it too, and
# the frame's border points follow the motion near them outwards only (``BorderFollow``). Every
# pixel is then drawn from inside the photo, and the chin can drop out of the frame without folding
# the mesh.
EDGE_INSET = 3.0
EDGE_BAND = 0.06  # fraction of the frame
BORDER_POINTS = 17  # per side
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


@dataclass(frozen=True)
class JawMap:
    """How a face state's openness becomes the photo's jaw. Openness below ``closed_below`` is a
    closed mouth (pressed, while talking); above it the jaw starts at ``lips_part`` and spans the
    rest of its travel linearly. The rig's lips roll apart over the jaw's first ~0.06 before any
    gap shows (the face mesh reads the same gap from 0 to 0.05 on every evaluation photo), so a
    small opening that starts at 0 shows as closed lips."""

    closed_below: float
    lips_part: float = 0.0

    def jaw(self, openness: float) -> float:
        if openness <= self.closed_below:
            return 0.0
        return min(self.lips_part + (1.0 - self.lips_part) * (openness - self.closed_below)
                   / (1.0 - self.closed_below), 1.0)

    def press(self, openness: float, talking: float) -> float:
        return talking * _clip(1.0 - openness / self.closed_below, 0.0, 1.0)


# Openness read off a driver face: the motion reader reads ~0.0-0.12 on closed driver mouths,
# and a photo's lips must meet in silence.
READ_JAW = JawMap(closed_below=0.1)
# Openness heard in the audio (``engine.stages.redraw.HeardMouth``) is 0 where the lips meet, and
# follows a real mouth's gap linearly (it is fitted to real lip gaps): any opening parts the lips.
# Against real mouths (``avatar eval --real``) the served read moved from r 0.610 to 0.625 on the
# tuning clips and from 0.520 to 0.546 held out (the heard openness itself reads 0.654 / 0.562).
HEARD_JAW = JawMap(closed_below=0.05, lips_part=0.06)


def photo_motion(state: FaceState, talking: float = 0.0, jaw: JawMap = READ_JAW) -> FaceMotion:
    """The photo's motion for a face state: ``jaw`` turns its openness into the jaw's travel and
    a press of the lips; the head pose is taken as it is; ``talking`` (the speech envelope)
    eases a posed smile."""
    talking = _clip(talking, 0.0, 1.0)
    return FaceMotion(jaw_open=jaw.jaw(state.openness),
                      mouth_width=min(max(state.wide - state.rounded, -1.0), 1.0),
                      blink=min(max(state.blink, 0.0), 1.0),
                      yaw=state.yaw, pitch=state.pitch, roll=state.roll, tx=state.tx, ty=state.ty,
                      press=jaw.press(state.openness, talking), talking=talking)


class PhotoRig:
    """A face photo (a crop from ``crop_face``) prepared for animation; ``render(motion)`` per frame."""

    def __init__(self, image: np.ndarray, face: Face, mouths: MouthBank | None = None, sway: float = 1.0,
                 jaw: JawMap = READ_JAW):
        image = np.ascontiguousarray(image)
        if image.ndim != 3 or image.shape[0] != image.shape[1] or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected a square (S, S, 3) uint8 image, got {image.dtype} {image.shape}")
        self.image = image
        self.size = image.shape[0]
        lm = face.landmarks.astype(np.float64)
        self.face = face
        self._lm = lm
        xy = lm[:, :2]
        axes = FaceAxes.of(xy)
        self.mouth_width_px = axes.width
        self.face_center = xy[list(FACE_OVAL)].mean(0)
        # Depth for the head turn: the landmarks' own z, flattened about half-way to the face
        # plane (a 2-D warp cannot show what a full turn would hide).
        # The oval's far sides are clamped to its median depth so that they do not fold over the cheeks.
        z_plane = float(np.median(lm[list(FACE_OVAL), 2]))
        self._depth = DEPTH_SCALE * (np.minimum(lm[:, 2], z_plane) - 0.5 * z_plane)
        self._teeth_depth = float(self._depth[UPPER_LIP_CENTER]) + DEPTH_SCALE * TEETH_BEHIND_LIPS * axes.width
        bases = motion_bases(xy, axes)
        self._keep, self._ring1_jaw, self._ring1_z, self.mesh = self._build_mesh(xy, bases)
        lips = np.flatnonzero(np.isin(self._keep, LIPS_INNER_UPPER + LIPS_INNER_LOWER + LIPS_OUTER_UPPER
                                      + LIPS_OUTER_LOWER))
        self._lip_triangles = self.triangles[np.isin(self.triangles, lips).any(1)]
        self.bases = dataclasses.replace(bases, rest=self._unfolded(bases.rest))
        self.palette = mouth_palette(image, lm)
        self._warped = _lips_over_gap(image, xy, axes.width) if self.bases.rest.any() else image
        drawn = MouthInterior(image, lm, MouthFrame(axes.centre, axes.eu, axes.ev, axes.width), self.palette)
        self.mouth: MouthInterior | FootageMouth = drawn if mouths is None else FootageMouth(mouths, drawn)
        self.sway = float(sway)
        self.jaw = jaw

    def _build_mesh(self, xy: np.ndarray, bases: MotionBases) -> tuple[np.ndarray, np.ndarray, np.ndarray, WarpMesh]:
        """The landmarks the mesh uses, the inner ring's jaw drop and depth, and the mesh: the
        landmarks inside the frame, two rings around the face oval (the inner one moving, the outer
        one fixed, each left out where it nears the frame's edge) and the frame's border."""
        s = self.size
        oval = xy[list(FACE_OVAL)]
        oc = oval.mean(0)
        ring1 = oc + INNER_RING * (oval - oc)
        ring2 = oc + OUTER_RING * (oval - oc)
        k = np.linspace(0, s - 1, BORDER_POINTS)
        border = np.array(
            [(x, 0) for x in k] + [(x, s - 1) for x in k] + [(0, y) for y in k[1:-1]] + [(s - 1, y) for y in k[1:-1]],
            np.float64,
        )
        ring2 = ring2[((ring2 > EDGE_BAND * s) & (ring2 < (1 - EDGE_BAND) * s)).all(1)]
        in_frame = ((ring1 >= EDGE_INSET) & (ring1 <= s - 1 - EDGE_INSET)).all(1)
        ring1, ring1_oval = ring1[in_frame], np.array(FACE_OVAL)[in_frame]
        keep = _mesh_subset(xy, MIN_SPACING * s, s)
        pts = np.concatenate([xy[keep], ring1, ring2, border])
        n_lm, n_moving = len(keep), len(keep) + len(ring1)
        # Ring 1 takes part of the jaw drop of its oval point (the neck stretches).
        ring1_jaw = RING_JAW_FOLLOW * bases.jaw[ring1_oval]
        # Triangulated with the mouth open, so that the lip gap has triangles of its own.
        opened = pts.copy()
        opened[:n_lm] += bases.rest[keep] + bases.jaw[keep]
        opened[n_lm:n_moving] += ring1_jaw
        follow = BorderFollow(pts, n_moving, len(border), s)
        opened = follow.follow(opened)
        where = {int(k): i for i, k in enumerate(keep)}
        triangles = lip_ladder(delaunay(opened, s), opened, [where[k] for k in LIPS_INNER_UPPER],
                               [where[k] for k in LIPS_INNER_LOWER])
        mesh = WarpMesh(pts, triangles, n_lm, n_moving, follow, s)
        return keep, ring1_jaw, self._depth[ring1_oval], mesh

    def _unfolded(self, rest: np.ndarray) -> np.ndarray:
        """The closed rest, backed off point by point where it would turn a triangle of the mesh over
        (towards the corners of a wide-open mouth, whose lips then meet a little less)."""
        if not rest.any():
            return rest
        mesh = self.mesh
        scale = np.ones(NUM_LANDMARKS)
        for _ in range(40):
            pts = mesh.src.copy()
            pts[: mesh.n_landmarks] += (scale[:, None] * rest)[self._keep]
            bad = self.triangles[signed_areas(pts[self.triangles]) <= 0]
            corners = np.unique(bad[bad < mesh.n_landmarks])
            if corners.size == 0:
                break
            scale[self._keep[corners]] *= 0.85
        return scale[:, None] * rest

    @property
    def triangles(self) -> np.ndarray:
        return self.mesh.triangles

    @property
    def motion_region(self) -> np.ndarray:
        """(S, S) bool: the only pixels any motion can change."""
        return self.mesh.motion_region

    @property
    def lips(self):
        return self.bases.lips

    # ---- per frame ---------------------------------------------------------------------------------------------
    def moved_landmarks(self, motion: FaceMotion) -> np.ndarray:
        """(468, 2) landmark positions for ``motion``."""
        return self._move(motion)[0]

    def _lip_offsets(self, m: FaceMotion) -> tuple[np.ndarray, float]:
        """(468, 2) rest-frame landmark offsets of the expression, and how far the lips close
        (backed off where closing a smile's gap would fold the mesh between the lips)."""
        b = self.bases
        jaw, width, blink = _clip(m.jaw_open, 0, 1), _clip(m.mouth_width, -1, 1), _clip(m.blink, 0, 1)
        press, talking = _clip(m.press, 0, 1), _clip(m.talking, 0, 1)
        base = jaw * b.jaw + width * b.width + blink * b.blink + press * b.lips.press + talking * b.lips.relax
        close = min(press + talking * RELAX_CLOSE * b.lips.smile, CLOSE_MAX)
        for _ in range(16):
            offsets = base + close * b.lips.close
            if close == 0 or not self._folds(offsets, jaw):
                return offsets, close
            close *= 0.93
        return base, 0.0

    def _folds(self, offsets: np.ndarray, jaw: float) -> bool:
        mesh = self.mesh
        pts = mesh.src.copy()
        pts[: mesh.n_landmarks] += (self.bases.rest + offsets)[self._keep]
        pts[mesh.n_landmarks : mesh.n_moving] += jaw * self._ring1_jaw
        return bool((signed_areas(pts[self._lip_triangles]) <= 0).any())

    def _move(self, motion: FaceMotion) -> tuple[np.ndarray, np.ndarray, float]:
        """(468, 2) landmarks, (P, 2) control points (mesh landmarks, rings, border) and the lips'
        closing for ``motion``."""
        m = motion
        jaw = _clip(m.jaw_open, 0, 1)
        pts = self.mesh.src.copy()
        n, n1 = self.mesh.n_landmarks, self.mesh.n_moving
        lm = self._lm.copy()
        offsets, close = self._lip_offsets(m)
        lm[:, :2] += self.bases.rest + offsets
        lm[:, 2] = self._depth
        if m.yaw or m.pitch or m.roll or m.tx or m.ty:
            lm = self._turn(lm, m)
            ring = np.concatenate([pts[n:n1], self._ring1_z[:, None]], axis=1)
            pts[n:n1] += INNER_RING_FOLLOW * (self._turn(ring, m) - ring[:, :2])
        else:
            lm = lm[:, :2]
        pts[:n] = lm[self._keep]
        pts[n:n1] += jaw * self._ring1_jaw
        return lm, self.mesh.follow(pts), close

    def displaced(self, motion: FaceMotion) -> np.ndarray:
        """(P, 2) control point positions for ``motion`` (mesh landmarks first, then the rings and border)."""
        return self._move(motion)[1]

    def render(self, motion: FaceMotion) -> np.ndarray:
        """The (S, S, 3) uint8 frame for ``motion``."""
        lm, dst, close = self._move(motion)
        out = self.image.copy()
        if not self.mesh.warp_into(out, self._warped, dst):
            return out
        jaw = _clip(motion.jaw_open, 0, 1)
        press = _clip(motion.press, 0, 1)
        if jaw > 0 or (close > 0 and self.lips.parted):
            skull = self._head_affine(motion)
            drop = jaw * TEETH_JAW_FOLLOW * self.bases.jaw[LOWER_LIP_CENTER]
            opening = float(smoothstep(jaw / 0.12))
            # What a press leaves of a gap (a smile's own, closing): the lips meet there.
            meeting = min(press, close / CLOSE_MAX) * (1 - opening)
            self.mouth.paint(out, lm, skull, drop, max(opening, meeting), meeting)
        elif press > 0 or self.bases.rest.any():  # lips that meet (in the photo, or at the closed rest): the
            press_line(out, lm, max(press, REST_LINE))  # line between them shows, deeper when pressed
        return out

    def source_map(self, motion: FaceMotion) -> np.ndarray:
        """(S, S, 2) float32: where in the photo crop each output pixel of ``motion`` is drawn from
        (x, y), before any clamping; the identity where nothing moves. A pixel whose source lies
        more than half a pixel outside the crop would be an invented one."""
        return self.mesh.source_map(self._move(motion)[1])

    def _head_affine(self, motion: FaceMotion) -> np.ndarray:
        """2x3: the photo's pixels to this frame's, for points at the teeth's depth (the head's turn and
        shift; the teeth hang from the upper lip, lowered a little where the rest closes the lips)."""
        f = self.mouth.frame
        rest = np.array([f.centre, f.centre + f.width * f.eu, f.centre + f.width * f.ev])
        hung = rest + self.bases.rest[UPPER_LIP_CENTER]
        moved = self._turn(np.concatenate([hung, np.full((3, 1), self._teeth_depth)], 1), motion)
        return cv2.getAffineTransform(rest.astype(np.float32), moved.astype(np.float32)).astype(np.float64)

    def _turn(self, points: np.ndarray, motion: FaceMotion) -> np.ndarray:
        """(n, 2): (n, 3) rest points (x, y, depth) turned and shifted with the head about the face's centre."""
        yaw, pitch, roll = (_clip(a, -0.5, 0.5) for a in (motion.yaw, motion.pitch, motion.roll))
        shift = np.array([motion.tx, motion.ty]) * self.size
        pivot = np.array([*self.face_center, 0.0])
        return ((points - pivot) @ _rotation(yaw, pitch, roll).T + pivot)[:, :2] + shift

    def draw(self, state: FaceState, talking: float = 0.0) -> np.ndarray:
        """The frame for a face state read off a driver face (``engine.stages.redraw``'s drawer),
        the head's motion scaled by ``sway``."""
        motion = photo_motion(state, talking, self.jaw)
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
                   sway: float = 1.0, jaw: JawMap = READ_JAW) -> PhotoRig:
        """A rig for a square photo crop (``crop_face``) and its face (landmarks in crop pixels);
        ``mouths``: the person's own mouth from their footage, ``sway``: how much more or less than
        the driver they move their head (a personal avatar), ``jaw``: where the face states' mouths
        come from (read off a driver face, or heard)."""
        return cls(image, face, mouths, sway, jaw)


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
