"""The procedural puppet: deterministic pixels, distinct identities, and a mouth that follows speech."""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from engine.puppet import (
    FACE_STATE_FIELDS,
    IDENTITIES,
    NEUTRAL,
    FaceState,
    Identity,
    face_track_from_audio,
    get_identity,
    identity_names,
    mouth_track,
    reference_image,
    render,
    render_video,
    stack_states,
)
from engine.puppet.mouth import LOOKAHEAD_FRAMES
from engine.puppet.state import MOUTH_SHAPES
from engine.puppet.visemes import REST_OPENNESS

SR = 16000


def _espeak(tmp: Path, text: str, voice: str = "en") -> np.ndarray:
    """Speak ``text`` with espeak-ng and return it as 16 kHz mono float32."""
    path = tmp / f"{voice}-{''.join(c if c.isalnum() else '_' for c in text)}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    with wave.open(str(path)) as w:
        sr = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
    t = np.arange(int(len(pcm) * SR / sr)) / SR
    return np.interp(t, np.arange(len(pcm)) / sr, pcm).astype(np.float32)


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    tmp = tmp_path_factory.mktemp("speech")
    return {
        "aa": _espeak(tmp, "aaaah"),
        "oo": _espeak(tmp, "oooo"),
        "ee": _espeak(tmp, "eeee"),
        "oo_f": _espeak(tmp, "oooo", "en+f3"),
        "sentence": _espeak(tmp, "hello there, how are you today"),
    }


def _dark_mouth_pixels(img: np.ndarray, ident: Identity) -> np.ndarray:
    """Mask of near-black pixels in the lower face: the open mouth's interior."""
    s = img.shape[0]
    cy = int((0.5 - 0.06 + 0.5 * ident.face_height) * s)
    box = img[cy - s // 8 : cy + s // 8, s // 2 - s // 6 : s // 2 + s // 6].astype(np.float32)
    luma = box @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    return luma < 50


def test_render_shape_dtype_and_neutral_reference() -> None:
    for size in (64, 101, 256):
        img = render("ada", FaceState(openness=0.5, open=1.0, closed=0.0), size)
        assert img.shape == (size, size, 3) and img.dtype == np.uint8
    assert np.array_equal(reference_image("ben", 64), render(get_identity("ben"), NEUTRAL, 64))
    states = [NEUTRAL, FaceState(openness=1.0, closed=0.0, open=1.0)]
    video = render_video("cleo", states, 48)
    assert video.shape == (2, 48, 48, 3) and video.dtype == np.uint8


def test_render_is_deterministic() -> None:
    state = FaceState(openness=0.7, open=0.5, wide=0.5, closed=0.0, blink=0.4, yaw=0.2, pitch=-0.1, roll=0.1)
    ident = Identity.sample(np.random.default_rng(7))
    assert np.array_equal(render(ident, state, 128), render(ident, state, 128))
    assert Identity.sample(np.random.default_rng(7)) == ident


def test_bundled_identities_look_distinct() -> None:
    names = identity_names()
    assert len(names) >= 6 and set(names) == set(IDENTITIES)
    refs = {n: reference_image(n, 64).astype(np.float32) for n in names}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert np.abs(refs[a] - refs[b]).mean() > 15.0, (a, b)
    styles = {IDENTITIES[n].hair_style for n in names}
    assert {"short", "long", "bun", "bald", "fringe"} <= styles
    assert {IDENTITIES[n].accessory for n in names} == {"none", "glasses", "earrings"}


def test_unknown_identity_lists_the_names() -> None:
    with pytest.raises(KeyError, match="ada"):
        get_identity("nobody")


def test_sampled_identities_differ() -> None:
    rng = np.random.default_rng(0)
    people = [Identity.sample(rng) for _ in range(8)]
    imgs = [reference_image(p, 48).astype(np.float32) for p in people]
    diffs = [np.abs(imgs[i] - imgs[j]).mean() for i in range(8) for j in range(i + 1, 8)]
    assert min(diffs) > 5.0
    assert len({p.hair_style for p in people}) >= 3


def test_mouth_interior_grows_with_openness() -> None:
    ident = get_identity("dev")
    counts = []
    for o in (0.0, 0.25, 0.5, 0.75, 1.0):
        img = render(ident, FaceState(openness=o, closed=0.0, open=1.0), 128)
        counts.append(int(_dark_mouth_pixels(img, ident).sum()))
    assert counts[0] <= 5
    assert all(a < b for a, b in zip(counts, counts[1:], strict=False)), counts


def test_rounded_and_wide_mouths_have_distinct_proportions() -> None:
    ident = get_identity("fay")

    def aspect(**shape: float) -> float:
        mask = _dark_mouth_pixels(render(ident, FaceState(openness=0.9, closed=0.0, **shape), 256), ident)
        rows, cols = np.nonzero(mask)
        return (rows.max() - rows.min() + 1) / (cols.max() - cols.min() + 1)

    rounded, opened, wide = aspect(rounded=1.0), aspect(open=1.0), aspect(wide=1.0)
    assert rounded > opened > wide
    assert rounded > 0.8 and wide < 0.35


def test_face_state_round_trips_through_arrays() -> None:
    state = FaceState(openness=0.3, closed=0.2, open=0.8, blink=1.0, yaw=-0.1, gaze_x=0.5)
    back = FaceState.from_array(state.to_array())
    np.testing.assert_allclose(back.to_array(), state.to_array())
    assert back.blink == 1.0 and back.open == pytest.approx(0.8)
    assert stack_states([state, NEUTRAL]).shape == (2, len(FACE_STATE_FIELDS))


def test_open_vowel_opens_the_mouth(speech: dict[str, np.ndarray]) -> None:
    track = mouth_track(speech["aa"], SR)
    voiced = track.openness > 0.3
    assert voiced.sum() >= 5 and track.openness.max() > 0.7
    assert (track.weights[voiced].argmax(axis=1) == MOUTH_SHAPES.index("open")).all()
    assert track.weight("open")[voiced].mean() > 0.65
    assert track.openness[-1] == pytest.approx(REST_OPENNESS, abs=0.01)  # espeak's trailing silence: back at rest


def test_the_mouth_stays_open_while_a_vowel_still_sounds(speech: dict[str, np.ndarray]) -> None:
    """The silence after a vowel is heard before the vowel's last frames are made; they are
    still speech, so the gate must not shut them."""
    pcm = speech["aa"]
    frames = len(pcm) // (SR // 25)
    peaks = np.abs(pcm[:frames * (SR // 25)]).reshape(frames, -1).max(axis=1)
    loud = np.nonzero(peaks > 0.5 * peaks.max())[0]
    track = mouth_track(pcm, SR)
    assert loud[-1] >= 6  # the vowel sounds for a quarter second or more
    assert track.openness[: loud[-1] + 1].min() > 0.3


@pytest.mark.parametrize("voices", [("", ""), ("_f", "")])
def test_oo_is_rounded_and_ee_is_wide(speech: dict[str, np.ndarray], voices: tuple[str, str]) -> None:
    oo, ee = mouth_track(speech["oo" + voices[0]], SR), mouth_track(speech["ee" + voices[1]], SR)
    oo_on, ee_on = oo.openness > 0.1, ee.openness > 0.1  # "oo" and "ee" are small openings
    assert oo_on.sum() >= 3 and ee_on.sum() >= 3
    oo_round, oo_wide = oo.weight("rounded")[oo_on].mean(), oo.weight("wide")[oo_on].mean()
    ee_round, ee_wide = ee.weight("rounded")[ee_on].mean(), ee.weight("wide")[ee_on].mean()
    # Shapes heard are blends (measured: "oo" rounded 0.24-0.36, wide 0.14-0.20; "ee" rounded 0.03-0.05,
    # wide 0.31-0.38): the vowel's own shape leads, and it leads the other vowel's by far.
    assert oo_round > oo_wide and ee_wide > ee_round, (oo_round, oo_wide, ee_wide, ee_round)
    assert oo_round > 3 * ee_round and ee_wide > 1.5 * oo_wide, (oo_round, ee_round, ee_wide, oo_wide)


def test_face_track_is_seeded_causal_and_alive(speech: dict[str, np.ndarray]) -> None:
    pad = np.zeros(4 * SR, dtype=np.float32)
    pcm = np.concatenate([pad, speech["sentence"], pad, speech["sentence"]])
    track = stack_states(face_track_from_audio(pcm, SR, seed=3))
    assert np.array_equal(track, stack_states(face_track_from_audio(pcm, SR, seed=3)))
    assert not np.array_equal(track, stack_states(face_track_from_audio(pcm, SR, seed=4)))
    head = stack_states(face_track_from_audio(pcm[: 6 * SR], SR, seed=3))
    head = head[:-LOOKAHEAD_FRAMES]  # the end lacks the lookahead
    np.testing.assert_allclose(head, track[: len(head)], atol=1e-6)

    col = {name: track[:, i] for i, name in enumerate(FACE_STATE_FIELDS)}
    assert np.all(col["openness"][:90] == REST_OPENNESS) and col["openness"].max() > 0.7
    assert (col["blink"] > 0.9).sum() >= 2  # people blink every few seconds
    speaking = col["openness"] > 0.1
    yaw_speed = np.abs(np.diff(col["yaw"]))
    assert yaw_speed[speaking[1:]].mean() > yaw_speed[~speaking[1:]].mean()
