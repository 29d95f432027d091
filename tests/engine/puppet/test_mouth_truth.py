"""The mouth says the words, not the loudness: the phonetic ground truth closes the lips on
p/b/m however loud, opens them on a whispered vowel, rests between words, and the tracker that
hears phones in bare audio keeps music, noise and tones at rest."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from engine.eval.material import EVAL_SENTENCES, EVAL_VOICES
from engine.media.espeak import Speech
from engine.media.espeak import speak as espeak
from engine.puppet import FaceTracker, mouth_track
from engine.puppet.mouth import phone_track
from engine.puppet.visemes import BILABIALS, LEAD, REST_OPENNESS, REST_WEIGHTS, Phone
from engine.train.speech import HELD_OUT_FLITE_VOICES, flite, flite_available

SR, FPS = 16000, 25

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def _frames_inside(phone: Phone, margin: float = 0.02) -> np.ndarray:
    """Video frames lying wholly inside ``phone`` (less ``margin`` seconds at each end)."""
    first = int(np.ceil((phone.start + margin) * FPS))
    last = int(np.floor((phone.end - margin) * FPS))  # exclusive
    return np.arange(first, last)


def _louder(speech: Speech, gain: float) -> Speech:
    return Speech(np.clip(speech.pcm * gain, -1.0, 1.0), speech.phones, speech.sample_rate)


@pytest.mark.parametrize("voice", EVAL_VOICES[:3])
def test_every_bilabial_in_held_out_speech_closes_the_lips(voice: str) -> None:
    said = espeak(EVAL_SENTENCES[4], voice, 160, 50, SR)  # "Please remember to water the ferns ..."
    track = phone_track(said.phones, said.pcm, SR, FPS)
    bilabials = [p for p in said.phones if p.name in BILABIALS]
    assert len(bilabials) >= 3
    for p in bilabials:
        frame = int(max(0.5 * (p.start + p.end) - LEAD, 0.0) * FPS)  # the lips close ahead of the sound
        assert track.openness[frame] == 0.0 and track.weight("closed")[frame] == pytest.approx(1.0), p
        around = track.openness[max(frame - 4, 0):frame + 5]
        assert around.max() > 0.15, p  # a closure in moving lips, not a shut mouth
    assert np.percentile(track.openness, 90) > 0.4


def test_a_loud_sustained_mmm_keeps_the_lips_closed() -> None:
    said = espeak("umm", "en-us", 120, 50, SR)
    m = next(p for p in said.phones if p.name == "M")
    inside = _frames_inside(m)
    assert m.end - m.start > 0.1 and inside.size >= 2
    for gain in (0.25, 1.0, 4.0):  # up to clipping: loudness must not part the lips
        track = phone_track(_louder(said, gain).phones, _louder(said, gain).pcm, SR, FPS)
        assert track.openness[inside].max() < 0.03, gain
        assert track.weight("closed")[inside].min() > 0.88, gain
        assert track.openness.max() > 0.3  # the "u" before it opens


def test_a_whispered_open_vowel_opens_the_lips() -> None:
    whispered = espeak("ah", "en-us+whisper", 140, 50, SR)
    voiced = espeak("ah", "en-us", 140, 50, SR)
    level = lambda s: 10 * np.log10(np.mean(s.pcm.astype(np.float64) ** 2))  # noqa: E731
    assert level(whispered) < level(voiced) - 6.0  # a whisper is much quieter
    w, v = (phone_track(s.phones, s.pcm, SR, FPS) for s in (whispered, voiced))
    assert w.openness.max() > 0.6 and w.weight("open")[w.openness > 0.6].mean() > 0.9
    assert w.openness.max() > 0.8 * v.openness.max()  # loudness is emphasis, not the opening


def test_silence_rests_at_the_relaxed_mouth() -> None:
    hiss = np.random.default_rng(0).normal(0, 1e-4, 3 * SR + 100).astype(np.float32)
    truth = phone_track([], hiss, SR, FPS)
    heard = mouth_track(hiss, SR, FPS)
    for track in (truth, heard):
        assert len(track) == 76
        np.testing.assert_allclose(track.openness, REST_OPENNESS, atol=1e-6)
        np.testing.assert_allclose(track.weights, np.broadcast_to(REST_WEIGHTS, track.weights.shape), atol=1e-6)
    assert 0.0 < REST_OPENNESS < 0.05 and REST_WEIGHTS[0] > 0.8  # lips just apart, not pressed shut
    tracker = FaceTracker(SR, FPS, seed=1)
    states = tracker.push(hiss) + tracker.close()
    assert np.ptp([s.pitch for s in states]) > 0.01  # listening, not frozen


def _music(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A plucked melody with harmonics: notes a phone decoder still spells out as phones."""
    n = SR // 4
    t = np.arange(n) / SR
    notes = [sum(0.08 * np.sin(2 * np.pi * f * k * t) / k for k in range(1, 6)) * np.exp(-3 * t)
             for f in rng.choice([220.0, 247.0, 262.0, 294.0, 330.0, 349.0, 392.0, 440.0], int(seconds * 4))]
    return np.concatenate(notes).astype(np.float32)


@pytest.mark.parametrize("kind", ["noise", "music", "tone"])
def test_noise_music_and_a_tone_stay_near_rest(kind: str) -> None:
    rng = np.random.default_rng(3)
    t = np.arange(4 * SR) / SR
    pcm = {"noise": 0.1 * rng.standard_normal(t.size), "music": _music(4.0, rng),
           "tone": 0.3 * np.sin(2 * np.pi * 440.0 * t)}[kind].astype(np.float32)
    track = mouth_track(pcm, SR, FPS)
    assert track.openness.mean() < REST_OPENNESS + 0.02
    assert track.openness.max() < 0.12


@pytest.mark.skipif(not flite_available(), reason="flite is not installed")
def test_heard_phones_follow_a_held_out_real_speakers_voice() -> None:
    """flite's slt voice (built from a real speaker's recordings; training never hears it): the
    mouth heard from the audio alone follows the mouth of its known phones, and speaks."""
    said = flite(" ".join(EVAL_SENTENCES[:2]), HELD_OUT_FLITE_VOICES[0], SR)
    truth = phone_track(said.phones, said.pcm, SR, FPS).openness
    heard = mouth_track(said.pcm, SR, FPS).openness
    r = max(np.corrcoef(truth[: truth.size - lag], heard[lag:])[0, 1] for lag in range(3))
    assert r > 0.4, r
    assert heard.max() > 0.6 and heard.std() > 0.5 * truth.std()


def test_a_voice_opens_the_mouth_before_its_first_phone_is_spelled_out() -> None:
    """A real speaker after a second of silence: the mouth starts opening with the sound (up to
    160 ms before it, as a real mouth does: the speech gate hears the lookahead), and the silence
    before that rests."""
    from engine.eval.real import REAL_DIR
    from engine.media.audio_io import load_audio

    voice = load_audio(REAL_DIR / "retalk3.mp4", SR)
    first = int(np.nonzero(np.abs(voice) > 0.05)[0][0])
    pcm = np.concatenate([np.zeros(SR, np.float32), voice[first:first + SR]])
    openness = mouth_track(pcm, SR, FPS).openness
    np.testing.assert_allclose(openness[:FPS - 4], REST_OPENNESS, atol=1e-6)
    assert openness[FPS:FPS + 3].max() > 0.15, openness[FPS:FPS + 4]
