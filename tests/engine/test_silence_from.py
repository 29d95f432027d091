"""Interrupts: ``silence_from`` zeroes the audio a session holds from a sample on, so the
frames made after it are those of a session that was fed silence there; what was already
released or published is untouched."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.bench import speech_like
from engine.frames import drain
from engine.pipeline import Pipeline
from engine.state import AudioBuffer

pytestmark = pytest.mark.usefixtures("one_thread")

SR, SPF = 16000, 640


def test_audio_buffer_zeroes_the_held_samples_from_the_cut() -> None:
    x = np.arange(1, 301, dtype=np.float32)
    buf = AudioBuffer()
    buf.feed(x[:100])
    buf.feed(x[100:250])  # not merged yet
    buf.release_before(50)
    assert buf.silence_from(200) == 50
    np.testing.assert_array_equal(buf.read(50, 250), np.concatenate([x[50:200], np.zeros(50, np.float32)]))
    assert buf.silence_from(10) == 200  # every held sample; the released ones are gone, not zeroed
    np.testing.assert_array_equal(buf.read(50, 250), np.zeros(200, np.float32))
    with pytest.raises(IndexError):
        buf.read(0, 10)
    buf.feed(x[250:])  # audio fed after the cut plays
    np.testing.assert_array_equal(buf.read(250, 300), x[250:])
    assert buf.silence_from(1000) == 0 and (buf.offset, buf.total) == (50, 300)


def test_audio_buffer_silences_while_audio_is_fed() -> None:
    buf, blocks = AudioBuffer(), 400
    ones = np.ones(160, np.float32)

    def feeder() -> None:
        for _ in range(blocks):
            buf.feed(ones)

    thread = threading.Thread(target=feeder)
    thread.start()
    seen = set()
    while thread.is_alive():
        buf.silence_from(buf.total // 2)
        seen |= set(np.unique(buf.read(0, buf.total)).tolist())
    thread.join()
    assert seen <= {0.0, 1.0} and buf.total == blocks * ones.size
    assert buf.silence_from(0) == buf.total
    assert not buf.read(0, buf.total).any()


def test_frames_after_the_cut_are_those_of_a_session_fed_silence(micro_pipe: Pipeline) -> None:
    pcm = speech_like(4.0, SR, seed=12)
    cut = 40_000  # 2.5 s
    muted = pcm.copy()
    muted[cut:] = 0.0

    interrupted = micro_pipe.open_session(seed=3)
    interrupted.feed(pcm[:cut])
    frames = []
    while interrupted.ready():  # every chunk whose audio (lookahead included) is before the cut
        frames += interrupted.step()
    interrupted.feed(pcm[cut:])  # fed, not yet turned into frames
    assert interrupted.silence_from(cut) == pcm.size - cut
    interrupted.close_input()
    frames += drain(interrupted)

    def whole(audio: np.ndarray) -> list:
        s = micro_pipe.open_session(seed=3)
        s.feed(audio)
        s.close_input()
        return list(drain(s))

    fed_silence, spoken = whole(muted), whole(pcm)
    assert [f.index for f in frames] == [f.index for f in fed_silence] == list(range(100))
    for a, b in zip(frames, fed_silence, strict=True):
        assert a.chunk == b.chunk and np.array_equal(a.rgb, b.rgb) and np.array_equal(a.audio, b.audio)
    assert all(not f.audio.any() for f in frames if f.sample_index >= cut)
    late = [f.index for f, s in zip(frames, spoken, strict=True) if not np.array_equal(f.rgb, s.rgb)]
    assert late and min(late) * SPF >= cut - 2 * micro_pipe.frames_per_chunk * SPF  # the face changes near the cut


def test_a_cut_before_what_was_made_leaves_the_made_frames_alone(micro_pipe: Pipeline) -> None:
    pcm = speech_like(3.0, SR, seed=2)
    session = micro_pipe.open_session(seed=1)
    session.feed(pcm)
    session.close_input()
    made = []
    for _ in range(5):
        made += session.step()
    offset = session.audio.offset
    assert offset > 0 and made
    assert session.silence_from(0) == pcm.size - offset  # everything still held
    rest = list(drain(session))
    assert [f.index for f in made + rest] == list(range(75))
    assert all(np.array_equal(f.audio, pcm[f.sample_index:f.sample_index + SPF]) for f in made)
    assert all(not f.audio.any() for f in rest)
