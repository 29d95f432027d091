"""The puppet engine behind the batched surface: ``batch_key``, ``step_batch`` (drawn one by
one), ``set_quality`` (kept, nothing to turn) and ``silence_from``."""

from __future__ import annotations

import numpy as np
import pytest

from engine.bench import speech_like
from engine.frames import drain
from engine.pipeline import Pipeline
from engine.puppet.engine import PuppetPipeline, PuppetSession
from engine.quality import Quality

SR, SPF = 16000, 640


@pytest.fixture(scope="module")
def pipe() -> PuppetPipeline:
    puppet = Pipeline.from_config("puppet")
    assert isinstance(puppet, PuppetPipeline)
    return puppet


def closed(pipe: PuppetPipeline, avatar: str, seed: int, pcm: np.ndarray) -> PuppetSession:
    s = pipe.open_session(avatar=avatar, seed=seed)
    s.feed(pcm)
    s.close_input()
    return s


def test_step_batch_equals_each_session_drawn_alone(pipe: PuppetPipeline) -> None:
    clips = [("ada", 1, speech_like(1.3, SR, 1)), ("eli", 2, speech_like(0.9, SR, 2)),
             ("fay", 3, speech_like(1.22, SR, 3))]
    alone = [list(drain(closed(pipe, *clip))) for clip in clips]
    sessions = [closed(pipe, *clip) for clip in clips]
    frames: list[list] = [[] for _ in sessions]
    sizes = []
    while not all(s.finished for s in sessions):
        groups: dict = {}
        for i, s in enumerate(sessions):
            if (key := s.batch_key()) is not None:
                groups.setdefault(key, []).append(i)
        for members in groups.values():
            result = pipe.step_batch([sessions[i] for i in members])
            for i, published in zip(members, result.frames, strict=True):
                frames[i] += published
            assert set(result.timings) == {"track", "render"}
            sizes.append(len(members))
    assert max(sizes) == 3
    for want, got, (_, _, pcm) in zip(alone, frames, clips, strict=True):
        assert [f.index for f in got] == list(range(-(-pcm.size // SPF)))
        for a, b in zip(want, got, strict=True):
            assert (a.index, a.chunk) == (b.index, b.chunk)
            assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.audio, b.audio)


def test_keys_and_refusals(pipe: PuppetPipeline) -> None:
    live = pipe.open_session(seed=0)
    live.feed(np.zeros(3 * SPF + pipe.lookahead, np.float32))
    assert live.batch_key() is None and pipe.step_batch([live]).frames == [[]]
    live.feed(np.zeros(SPF, np.float32))  # a chunk's frames and the tracker's lookahead
    other = pipe.open_session(seed=1)
    other.feed(np.zeros(9 * SPF, np.float32))
    assert live.batch_key() == other.batch_key() and live.batch_key().kind == "N"
    assert live.batch_key().publish == pipe.chunk_frames
    ends = [closed(pipe, "ada", seed, np.zeros(2 * SPF, np.float32)) for seed in (0, 1)]
    keys = [s.batch_key() for s in ends]
    assert [k.kind for k in keys] == ["tail", "tail"] and keys[0] != keys[1]
    with pytest.raises(ValueError, match="different batch keys"):
        pipe.step_batch(ends)
    with pytest.raises(ValueError, match="twice"):
        pipe.step_batch([live, live])
    with pytest.raises(ValueError, match="another config"):
        PuppetPipeline().step_batch([live])


def test_quality_is_kept_and_silence_from_cuts_the_voice(pipe: PuppetPipeline) -> None:
    pcm = speech_like(2.0, SR, 7)
    cut = 20_000
    muted = pcm.copy()
    muted[cut:] = 0.0
    session = pipe.open_session(avatar="ben", seed=4)
    session.set_quality(Quality(interp=False, steps=1, guidance=False))
    assert session.quality == Quality(interp=False, steps=1, guidance=False)
    session.feed(pcm)
    assert session.silence_from(cut) == pcm.size - cut
    session.close_input()
    frames = list(drain(session))
    fed_silence = list(drain(closed(pipe, "ben", 4, muted)))
    spoken = list(drain(closed(pipe, "ben", 4, pcm)))
    assert [f.index for f in frames] == [f.index for f in fed_silence] == list(range(50))
    assert all(np.array_equal(a.rgb, b.rgb) and np.array_equal(a.audio, b.audio)
               for a, b in zip(frames, fed_silence, strict=True))
    assert any(not np.array_equal(a.rgb, b.rgb) for a, b in zip(frames, spoken, strict=True))
