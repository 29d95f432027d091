"""The crop: head-and-shoulders framing, a tighter square inside tight photos, landmarks in crop pixels."""

import cv2
import numpy as np
import pytest

from engine.eval.hard_cases import tight_crop
from engine.face.checks import FaceError, find_face
from engine.face.crop import crop_box, crop_face
from engine.face.detect import detect_faces
from engine.face.landmarks import FACE_OVAL, LIPS_OUTER_LOWER, face_landmarks


def test_framing(astronaut, astronaut_crop):
    crop, face = astronaut_crop
    assert crop.shape == (512, 512, 3) and crop.dtype == np.uint8
    oval = face.points(FACE_OVAL)
    extent = (oval.max(0) - oval.min(0)).max() / 512
    assert 0.4 <= extent <= 0.5
    eyes_y = (face.right_eye_center[1] + face.left_eye_center[1]) / 2 / 512
    assert abs(eyes_y - 0.4) < 0.01
    assert abs((oval[:, 0].min() + oval[:, 0].max()) / 2 / 512 - 0.5) < 0.01


def test_landmarks_follow_the_crop(astronaut_crop):
    crop, face = astronaut_crop
    again = face_landmarks(crop, detect_faces(crop)[0])
    err = np.linalg.norm(again.xy - face.xy, axis=1)
    # The crop is 2.2x the source here: a few px of the crop is about a pixel of the photo.
    assert err.mean() < 2.5 and np.percentile(err, 95) < 5


def test_other_sizes(astronaut, astronaut_face):
    crop, face = crop_face(astronaut, astronaut_face, 384)
    assert crop.shape == (384, 384, 3)
    big, face_big = crop_face(astronaut, astronaut_face, 768)
    np.testing.assert_allclose(face_big.xy, (face.xy + 0.5) * 2 - 0.5, atol=1e-3)
    with pytest.raises(ValueError):
        crop_face(astronaut, astronaut_face, 256)


def test_a_face_near_the_corner_is_framed_inside_the_photo(astronaut):
    # The face near the photo's top-left corner: the square shifts to stay inside the photo, so the
    # crop is the photo's own pixels (no column repeats its first pixel), the face off centre.
    shifted = np.ascontiguousarray(astronaut[60:, 120:])
    f = find_face(shifted)
    box = crop_box(f, shifted.shape)
    assert box.inside(shifted.shape) and (box.x0, box.y0) == (0, 0)
    crop, face = crop_face(shifted, f)
    assert crop.shape == (512, 512, 3)
    left = crop[:, :10].astype(int)
    assert np.abs(left - left[:, :1]).max() > 20
    expected = cv2.resize(shifted[: box.side, : box.side], (512, 512), interpolation=cv2.INTER_CUBIC)
    assert np.abs(crop.astype(int) - expected).mean() < 1.0
    eyes_y = (face.right_eye_center[1] + face.left_eye_center[1]) / 2 / 512
    assert eyes_y < 0.4


@pytest.mark.parametrize("fill", [0.6, 0.75, 0.9])
def test_a_face_filling_the_photo_fills_the_frame(astronaut, astronaut_face, fill):
    tight = tight_crop(astronaut, astronaut_face, fill)
    f = find_face(tight)
    box = crop_box(f, tight.shape)
    assert box.side == min(tight.shape[:2]) and box.inside(tight.shape)
    crop, face = crop_face(tight, f)
    oval = face.points(FACE_OVAL)
    assert (oval.max(0) - oval.min(0)).max() / 512 >= 0.9 * fill


def test_a_photo_cut_through_the_mouth_is_refused(astronaut, astronaut_face):
    lips = astronaut_face.points(LIPS_OUTER_LOWER)
    cut = np.ascontiguousarray(astronaut[: int(lips[:, 1].max()) + 2])
    f = find_face(cut)
    with pytest.raises(FaceError, match="cropped too tightly"):
        crop_face(cut, f)
