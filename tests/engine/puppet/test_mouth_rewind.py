"""Audio the tracker already heard changes (speech fed again over silence, an interrupt's cut):
``MouthTracker.rewind`` hears it again from there, made frames staying as they were."""

from __future__ import annotations

import numpy as np
import pytest

from engine.eval.real import REAL_DIR
from engine.media.audio_io import load_audio
from engine.puppet.mouth import MouthTrack, MouthTracker
from engine.puppet.visemes import REST_OPENNESS

SR, FPS = 16000, 25
SPF = SR // FPS


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    """1.5 s of a real speaker from the first sound on."""
    pcm = load_audio(REAL_DIR / "retalk3.mp4", SR)
    first = int(np.nonzero(np.abs(pcm) > 0.05)[0][0])
    return pcm[first:first + 3 * SR // 2]


def test_a_voice_fed_again_over_silence_is_heard_as_if_it_came_straight(voice: np.ndarray) -> None:
    silence = np.zeros(SR, np.float32)
    straight = MouthTracker(SR, FPS)
    expected = MouthTrack.concat([straight.push(np.concatenate([silence, voice])), straight.close()], FPS)

    rewound = MouthTracker(SR, FPS)
    early = rewound.push(np.zeros(SR + rewound.lookahead, np.float32))  # silence where the voice will go
    assert len(early) == SR // SPF  # the frames before the voice are made; the rest wait for their lookahead
    assert rewound.rewind(0) == SR  # made frames stay made: hearing starts again at the next one
    got = MouthTrack.concat([early, rewound.push(voice), rewound.close()], FPS)

    # The frames made before the voice rest (a mouth heard straight starts opening up to 120 ms
    # before the sound); from the voice's first frame on, the two follow each other.
    assert len(got) == len(expected)
    np.testing.assert_allclose(got.openness[:len(early)], REST_OPENNESS, atol=1e-6)
    after = slice(len(early), None)
    r = float(np.corrcoef(got.openness[after], expected.openness[after])[0, 1])
    assert r > 0.9, r  # measured 0.99
    assert got.openness[len(early)] > 0.3  # open on the voice's first frame


def test_an_interrupted_voice_rests_from_the_cut_not_a_lookahead_later(voice: np.ndarray) -> None:
    cut = SR // 2  # mid-speech
    rest = np.zeros(SR, np.float32)

    def track(rewind: bool) -> np.ndarray:
        tracker = MouthTracker(SR, FPS)
        made = [tracker.push(voice[:cut + tracker.lookahead])]  # heard past the cut: its lookahead
        if rewind:
            tracker.rewind(cut)
            made.append(tracker.push(rest))
        else:
            made.append(tracker.push(rest[tracker.lookahead:]))
        return MouthTrack.concat(made, FPS).openness

    forgot, remembered = track(True), track(False)
    first = cut // SPF
    np.testing.assert_array_equal(forgot[:first], remembered[:first])
    # from which frame on the mouth stays at rest (a closure inside the voice is not rest)
    settle = [next(k for k in range(first, len(o)) if (np.abs(o[k:] - REST_OPENNESS) < 0.05).all())
              for o in (forgot, remembered)]
    print(f"at rest {settle[0] - first} frames after the cut rewound, {settle[1] - first} not")
    assert settle[0] <= settle[1] and settle[0] - first <= 6


def test_a_resampler_rewound_continues_as_if_only_that_much_had_come() -> None:
    from engine.puppet.hearing import Resampler

    x = np.sin(np.arange(24_000) / 7.0).astype(np.float32)
    for rate in (SR, 24_000, 44_100):
        fresh, rewound = Resampler(rate), Resampler(rate)
        made = fresh.push(x[:9000]).size
        rewound.push(x)
        assert rewound.rewind(9000) == made
        after, expected = rewound.push(x[9000:]), fresh.push(x[9000:])
        assert after.size == expected.size  # the same samples from here on, but for the first,
        np.testing.assert_allclose(after[1:], expected[1:], atol=1e-6)  # drawn from silence before it
