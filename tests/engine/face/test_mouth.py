"""The mouth interior drawn between a photo's moving lips, read back off the rendered frames."""

import numpy as np
import pytest

from engine.face.landmarks import LIPS_INNER_LOWER, LIPS_INNER_UPPER
from engine.face.mouth import smooth_contour
from engine.face.palette import luminance
from engine.face.rig import FaceMotion, PhotoRig


@pytest.fixture(scope="module")
def closed_rig():
    from engine.eval.mouths import portraits
    from engine.photo.avatar import photo_avatar

    photo = photo_avatar(dict(portraits())["christophe_henner"])
    return PhotoRig.from_photo(photo.image, photo.face)


def _column(rig: PhotoRig, frame: np.ndarray, motion: FaceMotion, depth: float, inner: int = 2) -> np.ndarray:
    """Luma along the opening, ``depth`` of the way from the upper inner lip to the lower one,
    between the ``inner``-th lip points from each corner."""
    lm = rig.moved_landmarks(motion)
    up, lo = lm[list(LIPS_INNER_UPPER)], lm[list(LIPS_INNER_LOWER)]
    xs = np.arange(int(up[inner, 0]), int(up[-1 - inner, 0]))
    ys = np.interp(xs, up[:, 0], up[:, 1]) * (1 - depth) + np.interp(xs, lo[:, 0], lo[:, 1]) * depth
    return luminance(frame[np.round(ys).astype(int), xs].astype(np.float32))


def test_a_closed_mouth_opens_onto_separate_teeth_not_a_band(closed_rig):
    motion = FaceMotion(jaw_open=0.6, talking=1.0)
    frame = closed_rig.render(motion)
    teeth = _column(closed_rig, frame, motion, 0.15)
    # Bright crowns broken by darker gaps, several across the front.
    dark = teeth < 0.8 * np.percentile(teeth, 90)
    assert (dark[1:] & ~dark[:-1]).sum() >= 3, teeth.round()
    # Deeper in, the cavity: darker than the teeth, but not black.
    cavity = _column(closed_rig, frame, motion, 0.55)
    assert np.median(cavity) < 0.6 * np.median(teeth)
    assert np.median(cavity) > 25


def test_lower_teeth_and_tongue_show_as_the_jaw_opens(closed_rig):
    def near_lower_lip(jaw: float) -> float:
        motion = FaceMotion(jaw_open=jaw, talking=1.0)
        return float(np.median(_column(closed_rig, closed_rig.render(motion), motion, 0.85, inner=3)))

    assert near_lower_lip(1.0) > near_lower_lip(0.35) + 10


def test_the_same_opening_draws_the_same_interior_whatever_came_before(closed_rig):
    motion = FaceMotion(jaw_open=0.7, mouth_width=0.3, talking=1.0)
    first = closed_rig.render(motion)
    rng = np.random.default_rng(0)
    for _ in range(50):
        closed_rig.render(FaceMotion(jaw_open=rng.uniform(0, 1), yaw=rng.uniform(-0.2, 0.2), talking=rng.uniform(0, 1)))
    assert np.array_equal(first, closed_rig.render(motion))


def test_teeth_are_never_brighter_than_the_photos_eye_whites(closed_rig):
    p = closed_rig.palette
    for jaw in (0.3, 0.6, 1.0):
        motion = FaceMotion(jaw_open=jaw, talking=1.0)
        teeth = _column(closed_rig, closed_rig.render(motion), motion, 0.15)
        assert teeth.max() <= luminance(p.sclera) + 2


def test_the_opening_is_a_smooth_curve_through_the_lip_points():
    points = np.array([[0, 0], [10, 4], [20, 5], [30, 4], [40, 0]], np.float64)
    curve = smooth_contour(points)
    assert len(curve) == 4 * (len(points) - 1) + 1
    assert np.allclose(curve[::4], points)  # through every point
    assert np.abs(np.diff(curve[:, 1], 2)).max() < np.abs(np.diff(points[:, 1], 2)).max()


def test_lips_that_meet_in_the_photo_press_into_a_deeper_line(closed_rig):
    assert not closed_rig.lips.parted
    pressed = FaceMotion(press=1.0, talking=1.0)
    rest, frame = closed_rig.render(FaceMotion(talking=1.0)), closed_rig.render(pressed)
    seam = _column(closed_rig, frame, pressed, 0.5, inner=3)
    before = _column(closed_rig, rest, pressed, 0.5, inner=3)
    assert seam.mean() < 0.85 * before.mean(), (seam.mean(), before.mean())
    assert np.array_equal(frame[: int(closed_rig.face_center[1])], rest[: int(closed_rig.face_center[1])])
