"""Shared parts of the multi-device tests: sessions run on an engine spread over ranks and on
one device, what each decoded and generated, and a chunk sequence at a global latent index
past 10**6 that every rank runs at once (the ranks import this module by name: ``tests/`` is
on their path as it is on the test process's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from batch_helpers import float_frames
from conftest import enliven

from engine.bench import speech_like
from engine.config import EngineConfig, get_config
from engine.frames import PublishedFrame
from engine.models import ModelSet
from engine.schedule import ChunkSchedule
from engine.stages.audio_to_video import A2VInput
from engine.stages.context_gen import ContextRequest

SR = 16000
TOLERANCE = 1e-4  # fp32 max |diff| against one device
MILLION = 10**6
# (avatar, seed, voice, seconds): two sessions batched together whenever their keys match
VOICES = [("ada", 3, 0, 3.3), ("ben", 8, 1, 2.7)]


def deep_micro() -> EngineConfig:
    """``micro`` with four blocks, so that pipeline stages have somewhere to move."""
    cfg = get_config("micro")
    return cfg.replace(dit=dataclasses.replace(cfg.dit, depth=4))


def save_living(config: EngineConfig, folder: Path, seed: int) -> Path:
    """Checkpoints of ``config`` with living weights (no zero-initialised outputs) in ``folder``."""
    models = ModelSet.build(config, seed)
    for i, module in enumerate(models.modules().values()):
        enliven(module, seed * 100 + i + 1)
    models.save_dir(folder)
    return folder


@dataclass
class Run:
    frames: list[list[PublishedFrame]]  # per session
    video: list[torch.Tensor] = field(default_factory=list)  # every decoded video, float, in call order
    latents: list[torch.Tensor] = field(default_factory=list)  # every A2V output, in call order
    rows: list[int] = field(default_factory=list)  # sessions per step


class Recorder:
    """Stands in for the AudioToVideo stage; keeps a copy of every chunk's latents."""

    def __init__(self, stage: object, seen: list[torch.Tensor]) -> None:
        self.stage, self.seen = stage, seen

    def __getattr__(self, name: str) -> object:
        return getattr(self.stage, name)

    def __call__(self, inp: A2VInput) -> object:
        out = self.stage(inp)
        self.seen.append(out.latents.clone())
        return out


@contextmanager
def recording(pipe: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    """Decoded videos and generated latents of ``pipe`` (one device, or rank 0 of many)."""
    local = getattr(pipe, "local", pipe)
    run = Run([])
    with float_frames(monkeypatch) as decoded, monkeypatch.context() as m:
        m.setattr(local, "a2v", Recorder(local.a2v, run.latents))
        yield run
        run.video = list(decoded)


def run_sessions(pipe: object, monkeypatch: pytest.MonkeyPatch, voices=VOICES) -> Run:
    """Every session of ``voices`` to the end of its audio, batched whenever keys match."""
    sessions = []
    for avatar, seed, voice, seconds in voices:
        s = pipe.open_session(avatar=avatar, seed=seed)
        s.feed(speech_like(seconds, SR, voice))
        s.close_input()
        sessions.append(s)
    with recording(pipe, monkeypatch) as run:
        run.frames = [[] for _ in sessions]
        while not all(s.finished for s in sessions):
            groups: dict = {}
            for i, s in enumerate(sessions):
                key = s.batch_key()
                if key is not None:
                    groups.setdefault(key, []).append(i)
            for members in groups.values():
                result = pipe.step_batch([sessions[i] for i in members])
                run.rows.append(len(members))
                for i, frames in zip(members, result.frames, strict=True):
                    run.frames[i] += frames
    return run


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    assert len(a) == len(b) and a
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def assert_same_run(got: Run, want: Run) -> None:
    """The same frames (indices, chunks, audio; RGB within one level), float video and latents
    within fp32 tolerance of one device, from a living model (not a zero output)."""
    for g, w in zip(got.frames, want.frames, strict=True):
        assert [(f.index, f.chunk) for f in g] == [(f.index, f.chunk) for f in w]
        for x, y in zip(g, w, strict=True):
            np.testing.assert_array_equal(x.audio, y.audio)
            assert np.abs(x.rgb.astype(int) - y.rgb.astype(int)).max() <= 1
    assert {f.chunk[0] for frames in want.frames for f in frames} == {"N", "I"}
    assert max(want.rows) == 2  # the two sessions shared batches
    assert max_diff(got.latents, want.latents) <= TOLERANCE
    assert max_diff(got.video, want.video) <= TOLERANCE
    assert max(float(x.abs().max()) for x in want.latents) > 0.1


def chunks_at_a_million(context: object, k: int = MILLION // 3) -> list[torch.Tensor]:
    """(On every rank at once, or on one device) N_{k-1}, then N_k on the history it left,
    then the I chunk across their seam, on the real stage, with the reference encoded by this
    rank's DiT. Inputs are seeded, so every rank and the one-device run see the same."""
    pipe = context.pipe
    cfg, dit = pipe.config, pipe.models.dit
    sched = ChunkSchedule(cfg.schedule)
    gen = torch.Generator().manual_seed(8)
    h, w = (n * cfg.dit.patch for n in dit.grid)
    with torch.inference_mode():
        ref = dit.encode_reference(torch.randn(1, cfg.vae.latent_channels, h, w, generator=gen))
    rng = np.random.default_rng(0)

    def context_of(plan):
        lo, hi = pipe.context_gen.audio_span(plan.span).samples
        audio = rng.standard_normal(hi - lo).astype(np.float32) * 0.3
        return pipe.context_gen(ContextRequest(plan.span, audio, seed=11))

    first = pipe.a2v(A2VInput(sched.n_chunk(k - 1), context_of(sched.n_chunk(k - 1)), ref))
    second = pipe.a2v(A2VInput(sched.n_chunk(k), context_of(sched.n_chunk(k)), ref, first.history))
    seam = sched.i_chunk(k - 1)
    anchors = torch.randn(seam.span[1] - seam.span[0], cfg.vae.latent_channels, h, w, generator=gen)
    third = pipe.a2v(A2VInput(seam, context_of(seam), ref, anchors=anchors))
    assert second.history.frames() == list(range(sched.n_chunk(k).span[1] - cfg.dit.window,
                                                  sched.n_chunk(k).span[1]))
    return [first.latents, second.latents, third.latents]


@dataclass
class OneDevice:
    """What ``chunks_at_a_million`` needs of a rank, for a pipeline on one device."""

    pipe: object
    rank: int = 0
