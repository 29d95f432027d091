"""The head-and-shoulders crop: framing, landmarks in crop pixels, edge replication."""

import numpy as np
import pytest

from engine.face.checks import find_face
from engine.face.crop import crop_face
from engine.face.detect import detect_faces
from engine.face.landmarks import FACE_OVAL, face_landmarks


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


def test_edges_are_replicated(astronaut):
    # The face near the photo's top-left corner: the crop reaches outside it.
    shifted = np.ascontiguousarray(astronaut[60:, 120:])
    f = find_face(shifted)
    crop, face = crop_face(shifted, f)
    assert crop.shape == (512, 512, 3)
    # Left of the photo every row repeats its first pixel: the crop's leftmost columns are constant per row.
    left = crop[:, :10].astype(int)
    assert np.abs(left - left[:, :1]).max() <= 2
    eyes_y = (face.right_eye_center[1] + face.left_eye_center[1]) / 2 / 512
    assert abs(eyes_y - 0.4) < 0.01
