"""Lips that close, press and relax a posed smile, judged by the face mesh on rendered frames."""

import numpy as np

from engine.face.detect import detect_faces
from engine.face.landmarks import MOUTH_CORNERS, face_landmarks, lip_gap
from engine.face.rig import FaceMotion


def measure(frame: np.ndarray) -> np.ndarray:
    boxes = detect_faces(frame)
    assert boxes
    return face_landmarks(frame, boxes[0]).landmarks


def corner_lift(lm: np.ndarray) -> float:
    return float(lm[[13, 14], 1].mean() - lm[list(MOUTH_CORNERS), 1].mean())


def test_a_smile_on_its_teeth_closes_for_p_b_m(astronaut_rig):
    pressed = FaceMotion(press=1.0, talking=1.0)
    # The lips as moved: the gap the photo smiles with all but closed.
    rest_gap, pressed_gap = lip_gap(astronaut_rig._lm[:, :2]), lip_gap(astronaut_rig.moved_landmarks(pressed))
    assert rest_gap > 10 and pressed_gap < 0.2 * rest_gap, (rest_gap, pressed_gap)
    # As the face mesh reads the frames (it reads a stretched mouth as a little open).
    rest = lip_gap(measure(astronaut_rig.render(FaceMotion())))
    closed = lip_gap(measure(astronaut_rig.render(pressed)))
    assert closed < 0.7 * rest, (rest, closed)
    # The teeth are gone from between the lips: nothing there as bright as they were.
    frame = astronaut_rig.render(pressed)
    lm = astronaut_rig.moved_landmarks(pressed)
    x = np.arange(int(lm[78, 0]) + 8, int(lm[308, 0]) - 8)
    seam = np.interp(x, lm[[78, 13, 308], 0], (lm[[78, 13, 308], 1] + lm[[78, 14, 308], 1]) / 2)
    teeth = astronaut_rig.image[int(astronaut_rig._lm[13, 1]) + 4, x].astype(float)
    there = frame[np.round(seam).astype(int), x].astype(float)
    assert there.mean() < teeth.mean() - 25  # the lips' colour, darker than the teeth were


def test_a_posed_smile_eases_while_talking_and_returns_at_rest(astronaut_rig):
    assert astronaut_rig.lips.smile > 0.5
    rest = corner_lift(measure(astronaut_rig.render(FaceMotion())))
    talking = corner_lift(measure(astronaut_rig.render(FaceMotion(talking=1.0))))
    assert talking < 0.85 * rest, (rest, talking)
    assert np.array_equal(astronaut_rig.render(FaceMotion(talking=0.0)), astronaut_rig.render(FaceMotion()))


def test_lips_apart_in_the_photo_meet_at_rest(astronaut_rig):
    # The astronaut smiles on her teeth: at rest her lips meet (a closed-lip smile), and the teeth
    # come back as the mouth opens.
    assert lip_gap(astronaut_rig._lm[:, :2]) > 10
    assert lip_gap(astronaut_rig.moved_landmarks(FaceMotion())) < 1.0
    assert lip_gap(measure(astronaut_rig.render(FaceMotion()))) < 0.5 * lip_gap(measure(astronaut_rig.image))
    opened = astronaut_rig.render(FaceMotion(jaw_open=0.5, talking=1.0))
    lm = astronaut_rig.moved_landmarks(FaceMotion(jaw_open=0.5, talking=1.0))
    below_lip = opened[int(lm[13, 1]) + 2 : int(lm[13, 1]) + 6, int(lm[13, 0]) - 10 : int(lm[13, 0]) + 10]
    assert below_lip.mean() > 150  # enamel under the upper lip


def test_closing_never_folds_the_mesh(astronaut_rig):
    from engine.face.warp_mesh import signed_areas as _signed_areas

    for press in (0.5, 1.0):
        for jaw in (0.0, 0.3):
            dst = astronaut_rig.displaced(FaceMotion(jaw_open=jaw, press=press, talking=1.0))
            assert (_signed_areas(dst[astronaut_rig.triangles]) > 0).all()
