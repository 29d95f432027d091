"""Batched execution across sessions: ``Pipeline.step_batch`` over sessions with equal
``batch_key()`` equals stepping each session alone (frames in fp32, and the rolling state
left behind), for N and I chunks, guided and unguided, with the sessions at different
places on their timelines; and keys differ exactly where chunks cannot share a forward."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from batch_helpers import ATOL, assert_same_frames, assert_same_state, float_frames

from engine.bench import speech_like
from engine.frames import drain
from engine.pipeline import Pipeline, StreamSession
from engine.quality import Quality

pytestmark = pytest.mark.usefixtures("one_thread")

SR = 16000
# (avatar, seed, audio): different identities, noise and speech; one fed digital silence,
# which a guided chunk runs unguided (its own silent prediction) even inside a guided batch.
VOICES = [("ada", 3, 0), ("ben", 8, 1), ("cleo", 21, None)]


def open_sessions(pipe: Pipeline, seconds: float = 6.0) -> list[StreamSession]:
    sessions = []
    for avatar, seed, voice in VOICES:
        s = pipe.open_session(avatar=avatar, seed=seed)
        pcm = np.zeros(int(seconds * SR), np.float32) if voice is None else speech_like(seconds, SR, voice)
        s.feed(pcm)  # input left open: every chunk is a steady-state one, no end of stream
        sessions.append(s)
    return sessions


class BatchSpy:
    """Stands in for the DiT inside the AudioToVideo stage; records the batch size of each call."""

    def __init__(self, dit: torch.nn.Module) -> None:
        self.dit = dit
        self.rows: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.dit, name)

    def __call__(self, x: torch.Tensor, *args: object, **kwargs: object) -> tuple:
        self.rows.append(x.shape[0])
        return self.dit(x, *args, **kwargs)


@pytest.mark.parametrize("guided", [False, True], ids=["unguided", "guided"])
@pytest.mark.parametrize("interp", [True, False], ids=["interp", "no-interp"])
def test_step_batch_equals_each_session_stepped_alone(micro_weights: Path, monkeypatch: pytest.MonkeyPatch,
                                                      interp: bool, guided: bool) -> None:
    pipe = Pipeline.from_config("micro", weights=micro_weights, interp=interp, guidance=2.0 if guided else None)
    alone, batched = open_sessions(pipe), open_sessions(pipe)
    # Each session somewhere else on its timeline, all about to run an N chunk.
    offsets = [1, 3, 5] if interp else [1, 2, 4]
    for group in (alone, batched):
        for s, n in zip(group, offsets, strict=True):
            for _ in range(n):
                s.step()
    spy = BatchSpy(pipe.a2v.dit)
    monkeypatch.setattr(pipe.a2v, "dit", spy)
    kinds, published = [], 0
    with float_frames(monkeypatch) as decoded:
        for _ in range(6 if interp else 4):
            keys = [s.batch_key() for s in batched]
            assert keys[0] is not None and keys.count(keys[0]) == 3, keys
            kinds.append(keys[0].kind)
            spy.rows.clear()
            decoded.clear()
            result = pipe.step_batch(batched)
            batch_rows, batch_video = list(spy.rows), list(decoded)
            spy.rows.clear()
            decoded.clear()
            singles = [s.step() for s in alone]
            assert len(result.frames) == 3
            for want, got in zip(singles, result.frames, strict=True):
                assert_same_frames(want, got)
                published += len(got)
            assert len(batch_video) == len(decoded)  # one decoded video per session that published
            for want, got in zip(decoded, batch_video, strict=True):
                assert want.shape == got.shape and (want - got).abs().max() <= ATOL
            assert set(result.timings) >= {"context", "a2v"} and all(t >= 0 for t in result.timings.values())
            if keys[0].publish:
                assert set(result.timings) == {"context", "a2v", "sr", "decode"}
            if keys[0].kind == "N" and guided:
                # the first step pairs the two speaking rows with silence: 3 + 2 rows in one call,
                # as each speaking session alone runs its first step on 2 rows
                assert batch_rows[0] == 5 and spy.rows.count(2) == 2
                assert all(r == 3 for r in batch_rows[1:])
            else:
                assert all(r == 3 for r in batch_rows)
    assert kinds == (["N", "I"] * 3 if interp else ["N"] * 4)
    assert published == 3 * (3 if interp else 4) * pipe.frames_per_chunk  # I or N chunks publish a chunk each
    for a, b in zip(alone, batched, strict=True):
        assert_same_state(a, b)
    assert not torch.equal(alone[0].state.last_frame, alone[1].state.last_frame)  # the sessions really differ


def test_batched_sessions_run_on_to_the_end_as_they_would_alone(micro_pipe: Pipeline, monkeypatch) -> None:
    """Batch whatever keys match at each tick until every stream (closed, different lengths)
    is finished: the same frames and float video as stepping each alone, every frame once."""
    lengths = [3.1, 2.2, 4.05]

    def sessions() -> list[StreamSession]:
        out = []
        for (avatar, seed, voice), seconds in zip(VOICES, lengths, strict=True):
            s = micro_pipe.open_session(avatar=avatar, seed=seed)
            s.feed(speech_like(seconds, SR, voice or 5))
            s.close_input()
            out.append(s)
        return out

    alone, batched = sessions(), sessions()
    frames_alone = [list(drain(s)) for s in alone]
    frames_batched: list[list] = [[] for _ in batched]
    ticks = batch_sizes = 0
    while not all(s.finished for s in batched):
        groups: dict = {}
        for i, s in enumerate(batched):
            key = s.batch_key()
            if key is not None:
                groups.setdefault(key, []).append(i)
        for members in groups.values():
            result = micro_pipe.step_batch([batched[i] for i in members])
            for i, frames in zip(members, result.frames, strict=True):
                frames_batched[i] += frames
            batch_sizes = max(batch_sizes, len(members))
        ticks += 1
    assert batch_sizes == 3 and ticks < sum(s.chunks_run for s in batched)
    for want, got, seconds in zip(frames_alone, frames_batched, lengths, strict=True):
        assert [f.index for f in got] == list(range(-(-int(seconds * SR) // 640)))
        assert_same_frames(want, got)
    for a, b in zip(alone, batched, strict=True):
        assert_same_state(a, b)


def test_keys_differ_where_a_forward_cannot_be_shared(micro_pipe: Pipeline, micro_weights: Path) -> None:
    def at(chunks: int, pipe: Pipeline = micro_pipe, seed: int = 0) -> StreamSession:
        s = pipe.open_session(seed=seed)
        s.feed(speech_like(5.0, SR, seed))
        for _ in range(chunks):
            s.step()
        return s

    first, n1, i0, n2, n3 = at(0), at(1), at(2), at(3, seed=4), at(5, seed=7)
    k_first, k_n1, k_i0, k_n2, k_n3 = (s.batch_key() for s in (first, n1, i0, n2, n3))
    c, s_, window = micro_pipe.config.schedule.chunk, micro_pipe.config.schedule.seam, micro_pipe.config.dit.window
    assert (k_first.kind, k_first.history, k_first.first, k_first.publish) == ("N", (), True, c - s_)
    assert (k_n1.kind, k_n1.history, k_n1.first, k_n1.publish) == ("N", tuple(range(-window, 0)), False, 0)
    assert k_i0.kind == "I" and k_i0.steps == min(micro_pipe.steps, micro_pipe.config.interp_steps)
    a = micro_pipe.config.schedule.anchor
    assert k_i0.publish == c and k_i0.generate == (a, a + 2 * s_)
    assert len({k_first, k_n1, k_i0}) == 3  # first chunk, steady state, seam: three forwards
    assert k_n1 == k_n2 == k_n3  # same step, elsewhere on their timelines: one forward
    assert k_n1.steps == micro_pipe.steps and not k_n1.guided

    # the quality asked for is in the key of the next N chunk (not of an I chunk already owed)
    n3.set_quality(Quality(steps=1))
    assert n3.batch_key().steps == 1 and n3.batch_key() != k_n1
    n2.set_quality(Quality(interp=False))
    assert (n2.batch_key().interp, n2.batch_key().publish) == (False, c + s_)
    i0.set_quality(Quality(interp=False, steps=1))
    assert i0.batch_key() == k_i0
    guided = Pipeline.from_config("micro", weights=micro_weights, guidance=2.0)
    g1, g2 = at(1, guided), at(3, guided, seed=2)
    assert g1.batch_key().guided and g1.batch_key() == g2.batch_key()
    assert g1.batch_key() != k_n1  # other config, other engine
    g2.set_quality(Quality(guidance=False))
    assert not g2.batch_key().guided and g1.batch_key() != g2.batch_key()
    with pytest.raises(ValueError, match="different batch keys"):
        guided.step_batch([g1, g2])
    with pytest.raises(ValueError, match="another config"):
        guided.step_batch([n1])
    with pytest.raises(ValueError, match="twice"):
        micro_pipe.step_batch([n1, n1])
    # sessions of a with_interp sibling (same weights) batch with these ones
    sibling = micro_pipe.with_interp(False).open_session(seed=9)
    sibling.set_quality(Quality(interp=True))
    sibling.feed(speech_like(5.0, SR, 9))
    sibling.step()
    assert sibling.batch_key() == k_n1

    # nothing to run: no key; the end-of-stream publish: a key of its own
    starved = micro_pipe.open_session()
    starved.feed(np.zeros(micro_pipe.first_chunk_samples - 1, np.float32))
    assert starved.batch_key() is None and not starved.ready()
    assert micro_pipe.step_batch([starved]).frames == [[]]
    ends, frames = [], []
    for seed in (1, 2):
        s = micro_pipe.open_session(seed=seed)
        s.feed(speech_like(1.3, SR, seed))  # 33 frames: 9 latents, 3 N chunks
        s.close_input()
        frames = []
        while s.batch_key().kind != "tail":
            frames += s.step()
        ends.append(s)
    assert ends[0].batch_key().owner != ends[1].batch_key().owner != 0
    assert ends[0].batch_key() != ends[1].batch_key()
    tail = micro_pipe.step_batch([ends[1]]).frames[0]
    assert [f.index for f in frames + tail] == list(range(33))
    assert [(f.index, f.chunk) for f in tail] == [(n, "N2") for n in range(29, 33)]  # N2's last seam latent
    assert ends[1].finished and ends[1].batch_key() is None
