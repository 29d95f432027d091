"""HistoryWindow: the K/V an N chunk attends to are one pass over the whole window, as
training builds them, at every chunk size, or appended chunk by chunk where the config says;
batches stack and split windows row by row."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from conftest import living_models

from engine.config import get_config
from engine.modules.dit import KVBlock
from engine.sampler import noised
from engine.schedule import ChunkSchedule
from engine.stages.audio_to_video import A2VInput, AudioToVideo
from engine.stages.context_gen import ContextGen, ContextRequest
from engine.stages.history import HistoryWindow

pytestmark = pytest.mark.usefixtures("one_thread")


def run_chunks(chunk: int, count: int, append: bool = False):
    cfg = get_config("micro").with_schedule(chunk=chunk, interp=False).replace(append_history=append)
    models = living_models("micro", seed=3)
    stage, gen = AudioToVideo(cfg, models.dit), ContextGen(cfg, models.audio)
    sched = ChunkSchedule(cfg.schedule)
    ref = models.dit.encode_reference(torch.randn(1, cfg.vae.latent_channels, 2, 2,
                                                  generator=torch.Generator().manual_seed(1)))
    rng = np.random.default_rng(0)
    history, outs = None, []
    for k in range(count):
        plan = sched.n_chunk(k)
        lo, hi = gen.audio_span(plan.span).samples
        ctx = gen(ContextRequest(plan.span, rng.standard_normal(hi - lo).astype(np.float32) * 0.3, seed=k))
        out = stage(A2VInput(plan, ctx, ref, history))
        outs.append((plan, ctx, out))
        history = out.history
    return cfg, models, ref, outs


def test_one_latent_chunks_keep_the_window_of_one_joint_pass() -> None:
    cfg, models, ref, outs = run_chunks(chunk=1, count=5)
    window, sigma = cfg.dit.window, cfg.context_sigma
    plan, ctx, out = outs[-1]
    hist = out.history
    assert hist.frames() == list(range(plan.span[1] - window, plan.span[1]))
    # the newest latent at the context noise level, with its own audio tokens
    assert torch.allclose(hist.latents[:, -1], noised(out.latents, ctx.noise, sigma)[:, -1])
    assert torch.equal(hist.audio[:, -1], ctx.audio_tokens[:, -1])
    # the window's K/V are exactly one pass over its latents, seen with the reference only ...
    start = plan.span[1] - window
    t = torch.full(hist.latents.shape[:2], sigma)
    with torch.inference_mode():
        _, joint = models.dit(hist.latents, t, hist.audio, start, models.dit.context(start, ref, None))
        # ... which is not what passes over one latent at a time leave behind
        parts = [models.dit(hist.latents[:, i:i + 1], t[:, i:i + 1], hist.audio[:, i:i + 1], start + i,
                            models.dit.context(start + i, ref, None))[1] for i in range(window)]
    assert torch.allclose(hist.kv.k, joint.k, atol=1e-5) and torch.allclose(hist.kv.v, joint.v, atol=1e-5)
    assert window >= 2
    piecewise = functools.reduce(KVBlock.concat, parts)
    assert (piecewise.k - joint.k).abs().max() > 1e-3


def test_appended_history_keeps_the_older_k_v_and_adds_the_new_latent_seen_beside_them() -> None:
    cfg, models, ref, outs = run_chunks(chunk=1, count=5, append=True)
    window, sigma = cfg.dit.window, cfg.context_sigma
    (_, _, before), (plan, ctx, out) = outs[-2:]
    old, new = before.history, out.history
    assert new.frames() == list(range(plan.span[1] - window, plan.span[1]))
    assert torch.equal(new.latents[:, :-1], old.latents[:, 1:])
    kept = old.kv.newest(window - 1)
    older = new.kv.frame < plan.span[0]
    assert torch.equal(new.kv.k[:, :, older], kept.k) and torch.equal(new.kv.v[:, :, older], kept.v)
    s0 = plan.span[0]
    with torch.inference_mode():
        _, own = models.dit(new.latents[:, -1:], torch.full((1, 1), sigma), ctx.audio_tokens, s0,
                            models.dit.context(s0, ref, old.kv))
    assert torch.allclose(new.kv.k[:, :, ~older], own.k, atol=1e-6)
    assert torch.allclose(new.kv.v[:, :, ~older], own.v, atol=1e-6)


def test_a_chunk_as_long_as_the_window_needs_nothing_older() -> None:
    cfg, _, _, outs = run_chunks(chunk=get_config("micro").dit.window, count=2)
    for plan, _, out in outs:
        assert out.history.frames() == list(range(plan.span[1] - cfg.dit.window, plan.span[1]))
        assert out.history.latents.shape[1] == cfg.dit.window


def test_windows_stack_into_a_batch_and_split_into_owned_rows() -> None:
    *_, outs = run_chunks(chunk=1, count=4)
    a, b = outs[-2][2].history, outs[-1][2].history.shifted(-1)
    assert a.frames() == b.frames()
    both = HistoryWindow.stack([a, b])
    assert both.latents.shape[0] == 2 and both.kv.k.shape[1] == 2
    ra, rb = both.split()
    for row, want in ((ra, a), (rb, b)):
        assert torch.equal(row.latents, want.latents) and torch.equal(row.kv.k, want.kv.k)
        assert row.latents.untyped_storage().data_ptr() != both.latents.untyped_storage().data_ptr()
        assert row.nbytes() == want.nbytes()
