"""The speech reader: a frame's features never depend on how the stream was split, a block waits
for its lookahead, audio heard again after a rewind is read as if it had come straight, and the
state stays one window of audio."""

from __future__ import annotations

import numpy as np
import pytest

from engine.speech.encoder import SAMPLE_RATE
from engine.speech.reader import SpeechReader

FPS = 25
SPF = SAMPLE_RATE // FPS


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    from engine.eval.real import REAL_DIR
    from engine.media.audio_io import load_audio

    return load_audio(REAL_DIR / "retalk1.mp4", SAMPLE_RATE)[: 4 * SAMPLE_RATE]


def _stream(reader: SpeechReader, pcm: np.ndarray, pieces: list[int]) -> np.ndarray:
    """Push ``pcm`` in ``pieces`` (cycled), taking each frame as soon as it is ready; the rest at the end."""
    out, at, made, k = [], 0, 0, 0
    while at < pcm.size:
        reader.push(pcm[at:at + pieces[k % len(pieces)]])
        at, k = at + pieces[k % len(pieces)], k + 1
        while made < pcm.size // SPF and reader.ready(made):
            out.append(reader.features(made, 1))
            made += 1
    out.append(reader.features(made, pcm.size // SPF - made, final=True))
    return np.concatenate(out)


def test_features_do_not_depend_on_how_the_stream_was_split(voice: np.ndarray) -> None:
    whole = SpeechReader(FPS)
    whole.push(voice)
    expected = whole.features(0, voice.size // SPF, final=True)
    for pieces in ([SPF], [333, 4000, 17], [SAMPLE_RATE]):
        np.testing.assert_array_equal(_stream(SpeechReader(FPS), voice, pieces), expected)
    assert expected.shape == (100, 384) and expected.std() > 0.1


def test_a_block_waits_for_the_audio_past_its_end() -> None:
    reader = SpeechReader(FPS)
    assert reader.wait_frames == reader.block_frames + reader.lookahead_frames - 1 == 5
    needed = (reader.block_frames + reader.lookahead_frames) * SPF  # block 0 and its lookahead
    reader.push(np.zeros(needed - 3, np.float32))
    assert not reader.ready(0)
    with pytest.raises(RuntimeError, match="needs audio"):
        reader.features(0, 1)
    reader.push(np.zeros(3, np.float32))
    assert reader.ready(0) and reader.ready(3) and not reader.ready(4)
    assert reader.features(0, 4).shape == (4, 384)


def test_audio_heard_again_after_a_rewind_reads_as_if_it_came_straight(voice: np.ndarray) -> None:
    straight = SpeechReader(FPS)
    straight.push(voice)
    expected = straight.features(0, 100, final=True)
    rewound = SpeechReader(FPS)
    rewound.push(voice[: 40 * SPF])
    early = rewound.features(0, 20)
    rewound.push(np.zeros(30 * SPF, np.float32))  # silence heard, then the voice comes to replace it
    rewound.features(20, 8)
    rewound.rewind(40 * SPF)
    rewound.push(voice[40 * SPF:])
    np.testing.assert_array_equal(early, expected[:20])
    np.testing.assert_array_equal(rewound.features(28, 72, final=True), expected[28:])


def test_the_state_stays_one_window_of_audio() -> None:
    reader = SpeechReader(FPS)
    rng = np.random.default_rng(3)
    sizes = []
    for second in range(12):
        reader.push((0.05 * rng.standard_normal(SAMPLE_RATE)).astype(np.float32))
        reader.features(second * FPS - (5 if second else 0), FPS if second else FPS - 5)
        sizes.append(reader.audio.size)
    assert len(set(sizes[1:])) <= 4  # where the next block starts within its frames
    assert max(sizes) <= (reader.window_seconds + 0.5) * SAMPLE_RATE and len(reader.blocks) <= 1


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        SpeechReader(FPS, block_frames=0)
