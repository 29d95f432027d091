"""BlazeFace short-range detection on the astronaut portrait and variations of it."""

import numpy as np

from engine.face.detect import FaceBox, default_detector, detect_faces, detect_in_tiles, ssd_anchors, weighted_nms


def test_anchor_layout():
    a = ssd_anchors()
    assert a.shape == (896, 2)
    # 16x16 grid with 2 anchors per cell, then 8x8 with 6.
    np.testing.assert_allclose(a[0], [0.5 / 16, 0.5 / 16])
    np.testing.assert_allclose(a[1], a[0])
    np.testing.assert_allclose(a[512], [0.5 / 8, 0.5 / 8])
    np.testing.assert_allclose(a[512:518], np.repeat(a[512:513], 6, 0))


def test_one_face_on_the_astronaut(astronaut):
    faces = detect_faces(astronaut)
    assert len(faces) == 1
    f = faces[0]
    assert isinstance(f, FaceBox) and f.score > 0.8
    x0, y0, x1, y1 = f.box
    assert 150 < x0 < x1 < 300 and 60 < y0 < y1 < 200
    kp = f.keypoints
    assert kp.shape == (6, 2)
    inside = (kp[:4, 0] > x0) & (kp[:4, 0] < x1) & (kp[:4, 1] > y0) & (kp[:4, 1] < y1)
    assert inside.all()
    right_eye, left_eye, nose, mouth = kp[:4]
    assert right_eye[0] < nose[0] < left_eye[0]
    assert max(right_eye[1], left_eye[1]) < nose[1] < mouth[1]


def test_mirrored_and_letterboxed(astronaut):
    f = detect_faces(astronaut)[0]
    m = detect_faces(astronaut[:, ::-1].copy())[0]
    w = astronaut.shape[1]
    np.testing.assert_allclose([w - m.box[2], m.box[1], w - m.box[0], m.box[3]], f.box, atol=4)
    # A non-square image is letterboxed: a 100 px band on top shifts the face by 100 px.
    tall = np.concatenate([np.full((100, 512, 3), 128, np.uint8), astronaut], axis=0)
    t = detect_faces(tall)[0]
    np.testing.assert_allclose(np.array(t.box) - [0, 100, 0, 100], f.box, atol=0.08 * f.width)


def test_nothing_on_blank_or_noise():
    assert detect_faces(np.full((256, 256, 3), 127, np.uint8)) == []
    noise = np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    assert detect_faces(noise) == []


def test_a_face_small_in_a_wide_shot_is_found_in_tiles(astronaut):
    """On a 2048 px canvas the astronaut's face is 12 px in the model's whole-image view:
    found in the tiles of a quarter of the side, at its own box moved by where she was placed."""
    canvas = np.full((2048, 2048, 3), 190, np.uint8)
    y, x = 700, 900
    canvas[y:y + 512, x:x + 512] = astronaut
    ref = detect_faces(astronaut)[0]
    assert all(f.width > 1.5 * ref.width for f in detect_faces(canvas))  # whole: at most a false one
    (f,) = detect_faces(canvas, zoom=4)
    np.testing.assert_allclose(f.box, np.array(ref.box) + [x, y, x, y], atol=0.08 * ref.width)
    np.testing.assert_allclose(f.keypoints, ref.keypoints + [x, y], atol=0.08 * ref.width)
    # tiles overlapping by half: one face seen in several tiles is one box
    assert len(detect_in_tiles(default_detector(), canvas, 4)) == 1


def test_weighted_nms_merges_overlaps_by_score():
    boxes = np.array([[0, 0, 1, 1], [0.1, 0, 1.1, 1], [5, 5, 6, 6]], np.float64)
    scores = np.array([0.9, 0.3, 0.8])
    kps = np.zeros((3, 6, 2))
    kps[1] += 1.0
    out = weighted_nms(boxes, scores, kps)
    assert len(out) == 2
    box, kp, score = out[0]
    assert score == 0.9
    np.testing.assert_allclose(box[0], 0.1 * 0.3 / 1.2)
    np.testing.assert_allclose(kp[0, 0], 0.3 / 1.2)
