"""Training speech's perturbations: timings follow a speed change, an Opus round trip keeps the
audio's timing and length while changing its samples, a perturbed utterance keeps its phones."""

from __future__ import annotations

import numpy as np
import pytest

from engine.media.espeak import Speech, speak
from engine.train.augment import opus, perturb, warp

SR = 16_000


@pytest.fixture(scope="module")
def said() -> Speech:
    return speak("Hello there, how are you today?", "en-us", 160, 50, SR)


def test_a_faster_voice_has_shorter_phones(said: Speech) -> None:
    fast = warp(said, 1.1)
    assert abs(fast.pcm.size - said.pcm.size / 1.1) < 2
    assert [p.end for p in fast.phones] == pytest.approx([p.end / 1.1 for p in said.phones])


def test_an_opus_round_trip_keeps_timing_and_length_and_changes_the_samples(said: Speech) -> None:
    rng = np.random.default_rng(0)
    coded = opus(rng, said.pcm, SR)
    assert coded.shape == said.pcm.shape and coded.dtype == np.float32
    n = said.pcm.size - 400
    lags = range(-40, 41)  # samples: 2.5 ms either way
    scores = [float(np.dot(said.pcm[200:n], coded[200 + lag:n + lag])) for lag in lags]
    assert abs(list(lags)[int(np.argmax(scores))]) <= 16, "the decoder's pre-skip is taken off"
    r = np.corrcoef(said.pcm, coded)[0, 1]
    assert 0.8 < r < 0.9999, r  # the same speech, not the same samples


def test_perturbed_speech_keeps_its_phones_inside_its_audio(said: Speech) -> None:
    for seed in range(6):
        out = perturb(np.random.default_rng(seed), said)
        assert out.sample_rate == SR and out.pcm.dtype == np.float32 and np.isfinite(out.pcm).all()
        assert [p.name for p in out.phones] == [p.name for p in said.phones]
        assert out.phones[-1].end <= out.pcm.size / SR + 0.02
