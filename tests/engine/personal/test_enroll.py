"""Enrolment from synthetic footage whose mouth track is known and whose mouths are marked."""

from pathlib import Path

import numpy as np
import pytest
from personal_helpers import jaw_track, mark_level, portrait_rig, write_footage, write_long_blank

from engine.face.rig import FaceMotion, PhotoRig
from engine.personal.enroll import EnrollError, enroll, scan


@pytest.fixture(scope="module")
def speaker():
    return portrait_rig("filippo_giunchedi")


@pytest.fixture(scope="module")
def footage(speaker, tmp_path_factory):
    path = tmp_path_factory.mktemp("footage") / "talk.mp4"
    return path, write_footage(path, speaker, jaw_track(14.0))


@pytest.fixture(scope="module")
def enrolled(footage):
    stages = []
    avatar, report = enroll(footage[0], lambda f, stage: stages.append((f, stage)))
    return avatar, report, stages


def test_enrolment_recovers_the_mouth_track(footage):
    path, jaw = footage
    found = scan(path)
    assert len(found.frames) == len(found.reads) == 175  # 14 s read at 12.5 frames a second
    truth = jaw[:: 2][: len(found.frames)]
    r = np.corrcoef(found.openings(), truth)[0, 1]
    assert r > 0.95, r


def test_enrolment_keeps_mouths_across_the_jaws_travel(enrolled):
    avatar, report, stages = enrolled
    assert avatar.image.shape == (512, 512, 3) and avatar.mouths is not None
    assert report.entries >= 10 and report.coverage > 0.9
    assert report.seconds == pytest.approx(14.0, abs=0.2)
    assert stages[-1] == (1.0, "done") and any(s == "reading" for _, s in stages)
    fractions = [f for f, _ in stages]
    assert fractions == sorted(fractions)


def test_a_session_shows_the_persons_own_mouth_at_the_matching_opening(enrolled):
    """The footage marked each open mouth with its opening: the mark a personal rig shows at
    opening x says which footage frame its interior came from."""
    avatar, _, _ = enrolled
    rig = PhotoRig.from_photo(avatar.image, avatar.face, avatar.mouths)
    levels = []
    for jaw in (0.3, 0.5, 0.7, 0.9):
        motion = FaceMotion(jaw_open=jaw, talking=1.0)
        level = mark_level(rig.render(motion), rig.moved_landmarks(motion))
        assert level > 0, f"no mark at jaw {jaw}: the interior is not the footage's"
        assert abs(level - jaw) < 0.12, (jaw, level)
        levels.append(level)
    assert levels == sorted(levels)
    # The same opening, the same picture: frame 10,000 is frame 100.
    motion = FaceMotion(jaw_open=0.6, talking=1.0)
    assert np.array_equal(rig.render(motion), rig.render(motion))


def test_openings_the_footage_never_showed_are_drawn(speaker, tmp_path):
    path = tmp_path / "small.mp4"
    write_footage(path, speaker, jaw_track(12.0, top=0.35))
    avatar, report = enroll(path)
    assert report.coverage < 0.75, report
    rig = PhotoRig.from_photo(avatar.image, avatar.face, avatar.mouths)
    wide = FaceMotion(jaw_open=1.0, talking=1.0)
    assert mark_level(rig.render(wide), rig.moved_landmarks(wide)) < 0  # the drawn interior: no mark
    small = FaceMotion(jaw_open=0.25, talking=1.0)
    assert mark_level(rig.render(small), rig.moved_landmarks(small)) > 0


@pytest.mark.parametrize("kind, reason", [
    ("text", "not a video"),
    ("short", "too short"),
    ("dark", "too dark"),
    ("two", "several faces"),
    ("blank", "no face"),
    ("small", "face too small"),
    ("long", "too long"),
])
def test_unusable_footage_is_refused_in_one_line(kind, reason, speaker, tmp_path):
    path = tmp_path / f"{kind}.mp4"
    if kind == "text":
        path.write_text("this is not a video\n" * 100)
    elif kind == "short":
        write_footage(path, speaker, jaw_track(4.0))
    elif kind == "dark":
        write_footage(path, speaker, jaw_track(10.5), brightness=0.12)
    elif kind == "two":
        write_footage(path, speaker, jaw_track(10.5), faces=2)
    elif kind == "small":
        write_footage(path, speaker, jaw_track(10.5), scale=0.3)
    elif kind == "long":
        write_long_blank(path, 302)
    else:
        write_footage(path, speaker, jaw_track(10.5), brightness=0.0)
    with pytest.raises(EnrollError) as err:
        enroll(path)
    assert reason in err.value.reason and "\n" not in err.value.reason


def test_tightly_framed_footage_is_framed_inside_the_picture(speaker, enrolled, tmp_path):
    # A talking-head framing: the face fills the picture. The avatar's square lies inside the
    # footage (``crop_face`` refuses any other) and shows the face larger than a loose clip does.
    path = tmp_path / "tight.mp4"
    write_footage(path, speaker, jaw_track(10.5), canvas=320)
    avatar, _ = enroll(path)
    assert avatar.face.interocular > 1.3 * enrolled[0].face.interocular
    rows = avatar.image[-40:].astype(int)  # no curtain of replicated rows below the chin
    assert np.abs(rows - rows[:1]).max() > 20


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(EnrollError, match="no such file"):
        enroll(Path(tmp_path / "nothing.mp4"))
