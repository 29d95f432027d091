"""The 468-point mesh on the astronaut: determinism, plausibility and consistency under
mirroring, scaling, cropping and brightness/contrast changes."""

import cv2
import numpy as np

from engine.face.detect import detect_faces
from engine.face.landmarks import (
    CHIN,
    FACE_OVAL,
    FOREHEAD,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    NOSE_TIP,
    Face,
    face_landmarks,
    roi_from_box,
)

# Landmarks that swap under a horizontal mirror (the subject's right <-> left) and ones on the midline.
MIRROR_PAIRS = [(33, 263), (133, 362), (61, 291), (78, 308), (234, 454), (70, 300), (159, 386), (145, 374)]
MIDLINE = [NOSE_TIP, 13, 14, 0, 17, CHIN, FOREHEAD, 168]


def mesh(image) -> Face:
    return face_landmarks(image, detect_faces(image)[0])


def test_deterministic(astronaut):
    a, b = mesh(astronaut), mesh(astronaut)
    assert a.landmarks.shape == (468, 3) and a.landmarks.dtype == np.float32
    np.testing.assert_array_equal(a.landmarks, b.landmarks)


def test_plausible_layout(astronaut):
    f = mesh(astronaut)
    assert f.presence > 0.9
    eyes_y = max(f.right_eye_center[1], f.left_eye_center[1])
    nose = f.landmarks[NOSE_TIP]
    mouth = f.mouth_center
    assert f.landmarks[FOREHEAD, 1] < eyes_y < nose[1] < mouth[1] < f.landmarks[CHIN, 1]
    assert f.right_eye_center[0] < nose[0] < f.left_eye_center[0]
    # Inner lips: upper above lower; the nose tip is the nearest point to the camera of the midline.
    assert (f.points(LIPS_INNER_UPPER[2:9])[:, 1] <= f.points(LIPS_INNER_LOWER[2:9])[:, 1] + 0.5).all()
    assert f.landmarks[NOSE_TIP, 2] == f.landmarks[MIDLINE, 2].min()
    # Everything lies inside the detection box grown by 25% on each side.
    x0, y0, x1, y1 = f.box.box
    gx, gy = 0.25 * (x1 - x0), 0.25 * (y1 - y0)
    xy = f.xy
    assert ((xy[:, 0] > x0 - gx) & (xy[:, 0] < x1 + gx) & (xy[:, 1] > y0 - gy) & (xy[:, 1] < y1 + gy)).all()
    assert 35 < f.interocular < 55
    # The oval encloses the mouth and eyes.
    oval = f.points(FACE_OVAL).astype(np.float32)
    for p in (f.mouth_center, f.right_eye_center, f.left_eye_center):
        assert cv2.pointPolygonTest(oval, (float(p[0]), float(p[1])), False) > 0


def test_mirror_gives_mirrored_landmarks(astronaut):
    f = mesh(astronaut)
    m = mesh(astronaut[:, ::-1].copy())
    w = astronaut.shape[1]
    back = m.xy.copy()
    back[:, 0] = w - 1 - back[:, 0]
    for a, b in MIRROR_PAIRS:
        assert np.linalg.norm(back[b] - f.xy[a]) < 3.0, (a, b)
        assert np.linalg.norm(back[a] - f.xy[b]) < 3.0, (a, b)
    for i in MIDLINE:
        assert np.linalg.norm(back[i] - f.xy[i]) < 3.0, i
    # As point sets, every mirrored landmark has an original one nearby.
    d = np.linalg.norm(back[:, None] - f.xy[None], axis=2).min(1)
    assert d.mean() < 1.5 and d.max() < 4.0


def _mapped_error(f: Face, g: Face, scale: float, dx: float, dy: float) -> np.ndarray:
    want = f.xy * scale + [dx, dy]
    return np.linalg.norm(g.xy - want, axis=1)


def test_scaled_and_cropped_variants(astronaut):
    f = mesh(astronaut)
    for scale in (0.75, 1.5):
        img = cv2.resize(astronaut, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        g = mesh(img)
        # cv2.resize maps pixel centres: x' = (x + 0.5) * s - 0.5.
        err = _mapped_error(f, g, scale, 0.5 * scale - 0.5, 0.5 * scale - 0.5)
        assert err.mean() < 2.0 * max(scale, 1) and np.percentile(err, 95) < 4.0 * max(scale, 1), scale
    crop = astronaut[40:400, 90:380]
    err = _mapped_error(f, mesh(crop), 1.0, -90, -40)
    assert err.mean() < 2.0 and np.percentile(err, 95) < 4.0


def test_brightness_and_contrast(astronaut):
    f = mesh(astronaut)
    for gain, bias in ((0.6, 0), (1.3, -30), (1.0, 40)):
        img = np.clip(astronaut.astype(np.float32) * gain + bias, 0, 255).astype(np.uint8)
        err = _mapped_error(f, mesh(img), 1.0, 0, 0)
        assert err.mean() < 2.0 and err.max() < 6.0, (gain, bias)


def test_roi_is_level_with_the_eyes(astronaut):
    box = detect_faces(astronaut)[0]
    center, side, angle = roi_from_box(box)
    assert side == max(box.width, box.height) * 1.5
    assert abs(angle) < 0.2
    rotated = cv2.warpAffine(astronaut, cv2.getRotationMatrix2D((256, 256), -15, 1.0), (512, 512))
    f = mesh(rotated)
    eye = f.left_eye_center - f.right_eye_center
    assert np.degrees(np.arctan2(eye[1], eye[0])) > 8  # the mesh follows the roll
