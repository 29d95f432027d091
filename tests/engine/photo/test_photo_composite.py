"""PhotoComposite: driver frames in, the photo's own pixels out, moved as the driver moves."""

from __future__ import annotations

import numpy as np
import pytest

from engine.avatars import avatar_image
from engine.face.detect import detect_faces
from engine.face.landmarks import face_landmarks
from engine.face.rig import FaceMotion, PhotoRig
from engine.frames import PublishedFrame
from engine.photo.avatar import photo_avatar
from engine.puppet import FaceState, get_identity, render
from engine.stages.photo_composite import CLOSED_BELOW, PhotoComposite, PhotoState, to_motion

pytestmark = pytest.mark.usefixtures("one_thread")


def test_motion_keeps_mouth_and_lids_and_smooths_the_head() -> None:
    state = FaceState(openness=0.7, wide=0.6, rounded=0.1, blink=1.2, yaw=0.2, tx=0.02)
    first = to_motion(state, None)
    assert first == FaceMotion(jaw_open=pytest.approx((0.7 - CLOSED_BELOW) / (1 - CLOSED_BELOW)),
                               mouth_width=pytest.approx(0.5), blink=1.0, yaw=0.2, tx=0.02)
    then = to_motion(FaceState(openness=0.05, yaw=0.0), first, smoothing=0.5)
    assert then.jaw_open == 0.0, "a mouth read nearly closed is closed"
    assert then.yaw == pytest.approx(0.1) and then.tx == pytest.approx(0.01)
    assert to_motion(FaceState(openness=1.0), None).jaw_open == 1.0


def test_driver_frames_become_the_photo_moving_with_them(astronaut) -> None:
    photo = photo_avatar(astronaut)
    rig = PhotoRig.from_photo(photo.image, photo.face)
    driver = "ada"
    states = [FaceState(), FaceState(openness=0.9, closed=0.0, open=1.0), FaceState()]
    frames = [PublishedFrame(i, 25, render(get_identity(driver), s, 256), np.full(640, i, np.float32), 16000, "N0")
              for i, s in enumerate(states)]
    made, (after,) = PhotoComposite()([frames], [PhotoState(rig, avatar_image(driver, (256, 256)))])
    out = made[0]
    assert [f.index for f in out] == [0, 1, 2] and [float(f.audio[0]) for f in out] == [0.0, 1.0, 2.0]
    assert all(f.rgb.shape == (512, 512, 3) for f in out)
    still = ~rig.motion_region
    for f in out:
        assert np.array_equal(f.rgb[still], photo.image[still]), "outside the face the photo's own pixels"
    gaps = [face_landmarks(f.rgb, detect_faces(f.rgb)[0]).lip_gap() for f in out]
    rest = photo.face.lip_gap()
    assert gaps[1] > rest + 0.2 * photo.face.mouth_width, (gaps, rest)
    assert max(abs(gaps[0] - rest), abs(gaps[2] - rest)) < 0.1 * photo.face.mouth_width, (gaps, rest)
    assert after.last is not None and after.last.jaw_open < 0.3
