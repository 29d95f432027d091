"""3D RoPE with a global time index that stays bounded in an unbounded session.

At a global latent index of 10**6 every table lookup stays in range, and the DiT (and the
whole AudioToVideo stage) computes exactly what it computes for the same chunk re-based
near the start of a stream: attention depends only on relative positions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import enliven

from engine.config import get_config
from engine.modules.audio_encoder import AudioEncoder
from engine.modules.dit import A2VDiT, KVBlock
from engine.modules.rope import RopeTables, apply_rope, axis_split, token_grid, window_base
from engine.schedule import ChunkSchedule
from engine.stages.audio_to_video import A2VInput, AudioToVideo
from engine.stages.context_gen import ContextGen, ContextRequest

pytestmark = pytest.mark.usefixtures("one_thread")

MILLION = 10**6


def living_dit(name: str, seed: int = 0) -> A2VDiT:
    torch.manual_seed(seed)
    return enliven(A2VDiT(get_config(name)), seed + 1).eval()


def reference_kv(dit: A2VDiT, seed: int) -> KVBlock:
    gen = torch.Generator().manual_seed(seed)
    c = dit.config.vae.latent_channels
    h, w = (n * dit.config.dit.patch for n in dit.grid)
    with torch.inference_mode():
        return dit.encode_reference(torch.randn(1, c, h, w, generator=gen))


def random_history(dit: A2VDiT, first: int, frames: int, seed: int) -> KVBlock:
    gen = torch.Generator().manual_seed(seed)
    c = dit.config.dit
    n = frames * dit.tokens_per_frame
    shape = (c.depth, 1, n, c.heads, c.width // c.heads)
    frame = (torch.arange(frames) + first).repeat_interleave(dit.tokens_per_frame)
    return KVBlock(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), frame)


def shifted(kv: KVBlock, delta: int) -> KVBlock:
    return KVBlock(kv.k, kv.v, torch.where(kv.frame < 0, kv.frame, kv.frame + delta))


class SlotSpy:
    """Records every time slot looked up in any RopeTables."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.slots: list[int] = []
        self.calls: list[list[int]] = []
        original = RopeTables.lookup

        def lookup(tables: RopeTables, slot: torch.Tensor, y: torch.Tensor, x: torch.Tensor):
            self.slots += slot.tolist()
            self.calls.append(slot.tolist())
            return original(tables, slot, y, x)

        monkeypatch.setattr(RopeTables, "lookup", lookup)


# --- tables ----------------------------------------------------------------------------------


def test_lookup_refuses_out_of_range_slots() -> None:
    dit = living_dit("micro")
    tables = dit.rope_tables()
    n = tables.time_slots
    assert n == dit.time_slots
    y = torch.zeros(1, dtype=torch.long)
    for slot in (0, n - 1):
        cos, sin = tables.lookup(torch.tensor([slot]), y, y)
        assert cos.shape == sin.shape == (1, dit.config.dit.width // dit.config.dit.heads // 2)
    for slot in (-1, n, MILLION, MILLION + 3):
        with pytest.raises(IndexError):
            tables.lookup(torch.tensor([0, slot]), torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))


@pytest.mark.parametrize("name", ["micro", "tiny"])
def test_slots_stay_in_range_at_a_million_latents(name: str) -> None:
    cfg = get_config(name)
    dit = A2VDiT(cfg)
    window, sched = cfg.dit.window, ChunkSchedule(cfg.schedule)
    k = MILLION // cfg.schedule.chunk
    for plan in (sched.n_chunk(k), sched.n_chunk(k + 1), sched.i_chunk(k), sched.i_chunk(k + 1)):
        s0, s1 = plan.span
        assert s0 >= MILLION - cfg.schedule.chunk
        base = window_base(s0, window)
        own = [g - base for g in range(s0, s1)]
        history = [g - base for g in range(s0 - window, s0)]
        assert 0 < min(history) and max(own) < dit.time_slots, plan.name
        assert own == list(range(window + 1, window + 1 + s1 - s0))  # the same layout as at the start


@pytest.mark.parametrize("name", ["micro", "tiny"])
def test_dit_output_at_a_million_equals_rebased_window(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dit = living_dit(name, seed=2)
    cfg = dit.config
    window, f = cfg.dit.window, cfg.schedule.chunk
    gen = torch.Generator().manual_seed(7)
    lh, lw = (n * cfg.dit.patch for n in dit.grid)
    x = torch.randn(1, f, cfg.vae.latent_channels, lh, lw, generator=gen)
    t = torch.rand(1, f, generator=gen)
    audio = torch.randn(1, f, cfg.dit.audio_tokens, cfg.audio.width, generator=gen)
    ref = reference_kv(dit, 3)
    far = MILLION
    near = window + 1  # the same chunk with its window re-based to the stream start
    hist_far = random_history(dit, far - window, window, seed=4)
    hist_near = shifted(hist_far, near - far)
    assert hist_near.frames() == list(range(1, window + 1))

    spy = SlotSpy(monkeypatch)
    with torch.inference_mode():
        v_far, kv_far = dit(x, t, audio, far, dit.context(far, ref, hist_far))
        far_calls = list(spy.calls)
        spy.calls.clear()
        v_near, kv_near = dit(x, t, audio, near, dit.context(near, ref, hist_near))
    assert far_calls == spy.calls
    assert 0 <= min(map(min, far_calls)) and max(map(max, far_calls)) < dit.time_slots
    # slot = global frame - one offset for history and chunk alike (the reference sits at slot 0)
    context_slots, chunk_slots = far_calls
    n_ref = ref.frame.numel()
    assert context_slots[:n_ref] == [0] * n_ref
    chunk_frames = (far + token_grid(f, *dit.grid)[0]).tolist()
    offsets = {s - g for s, g in zip(context_slots[n_ref:], hist_far.frame.tolist(), strict=True)}
    offsets |= {s - g for s, g in zip(chunk_slots, chunk_frames, strict=True)}
    assert offsets == {-window_base(far, window)}
    assert v_far.abs().max() > 1e-3  # a living model, not a zero output
    assert (v_far - v_near).abs().max() < 1e-5
    assert (kv_far.k - kv_near.k).abs().max() < 1e-5 and (kv_far.v - kv_near.v).abs().max() < 1e-5
    assert torch.equal(kv_far.frame - far, kv_near.frame - near)

    # positions matter: the same history K/V attributed to other frames changes the output
    order = hist_far.frame.reshape(window, -1).flip(0).reshape(-1)
    with torch.inference_mode():
        v_swapped, _ = dit(x, t, audio, far, dit.context(far, ref, KVBlock(hist_far.k, hist_far.v, order)))
    assert (v_swapped - v_far).abs().max() > 1e-4

    # a history frame older than the window is refused, not silently clamped
    with pytest.raises(ValueError):
        dit.context(far, ref, random_history(dit, far - window - 1, window + 1, seed=5))


def run_stage_pair(stage: AudioToVideo, gen: ContextGen, ref: KVBlock, plan_far, plan_near,
                   history_far: KVBlock | None, history_near: KVBlock | None,
                   anchors: torch.Tensor | None, audio: np.ndarray):
    outs = []
    for plan, hist in ((plan_far, history_far), (plan_near, history_near)):
        span = gen.audio_span(plan.span)
        assert span.samples[1] - span.samples[0] == audio.size
        ctx = gen(ContextRequest(plan.span, audio, seed=11))
        outs.append(stage(A2VInput(plan, ctx, ref, hist, anchors)))
    return outs


def test_a2v_stage_at_a_million_equals_the_same_chunk_near_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real N and I chunk paths (sampler, history window, anchors) at latent ~10**6."""
    cfg = get_config("micro")
    dit = living_dit("micro", seed=5)
    torch.manual_seed(6)
    encoder = enliven(AudioEncoder(cfg), 7).eval()
    gen, stage = ContextGen(cfg, encoder), AudioToVideo(cfg, dit)
    sched, c = ChunkSchedule(cfg.schedule), cfg.schedule.chunk
    ref = reference_kv(dit, 8)
    k_far, k_near = MILLION // c, 2
    delta = (k_far - k_near) * c
    rng = np.random.default_rng(0)
    spy = SlotSpy(monkeypatch)

    # N_{k-1} without history, then N_k with the history it left
    n_len = gen.audio_span(sched.n_chunk(0).span).samples
    audio = rng.standard_normal(n_len[1] - n_len[0]).astype(np.float32) * 0.3
    first_far, first_near = run_stage_pair(stage, gen, ref, sched.n_chunk(k_far - 1), sched.n_chunk(k_near - 1),
                                           None, None, None, audio)
    assert torch.equal(first_far.latents, first_near.latents)
    assert first_far.history.frames() == [g + delta for g in first_near.history.frames()]
    second_far, second_near = run_stage_pair(stage, gen, ref, sched.n_chunk(k_far), sched.n_chunk(k_near),
                                             first_far.history, first_near.history, None, audio)
    assert (second_far.latents - second_near.latents).abs().max() < 1e-5
    assert len(second_far.history.frames()) == cfg.dit.window
    assert second_far.history.frames() == [g + delta for g in second_near.history.frames()]
    assert (second_far.history.kv.k - second_near.history.kv.k).abs().max() < 1e-5
    # the history matters: without it N_k comes out different
    alone, _ = run_stage_pair(stage, gen, ref, sched.n_chunk(k_far), sched.n_chunk(k_near), None, None, None, audio)
    assert (alone.latents - second_far.latents).abs().max() > 1e-4

    # I chunk across the boundary between them, anchored on both sides
    i_far, i_near = sched.i_chunk(k_far - 1), sched.i_chunk(k_near - 1)
    i_len = gen.audio_span(i_near.span).samples
    i_audio = rng.standard_normal(i_len[1] - i_len[0]).astype(np.float32) * 0.3
    anchors = torch.randn(i_near.span[1] - i_near.span[0], cfg.vae.latent_channels,
                          *(n * cfg.dit.patch for n in dit.grid), generator=torch.Generator().manual_seed(9))
    seam_far, seam_near = run_stage_pair(stage, gen, ref, i_far, i_near, None, None, anchors, i_audio)
    assert seam_far.history is None and seam_far.latents.shape[1] == i_far.generate[1] - i_far.generate[0]
    assert (seam_far.latents - seam_near.latents).abs().max() < 1e-5
    # the seam is generated from its anchors: other anchors, another seam
    other, _ = run_stage_pair(stage, gen, ref, i_far, i_near, None, None, anchors.flip(0), i_audio)
    assert (other.latents - seam_far.latents).abs().max() > 1e-4

    assert spy.slots and 0 <= min(spy.slots) and max(spy.slots) < dit.time_slots


# --- the rotary embedding itself -----------------------------------------------------------------


def rotated(vec: torch.Tensor, tables: RopeTables, t: int, y: int, x: int) -> torch.Tensor:
    cos, sin = tables.lookup(torch.tensor([t]), torch.tensor([y]), torch.tensor([x]))
    return apply_rope(vec[None, None, None], cos, sin)[0, 0, 0]


def test_rope_score_depends_only_on_position_difference() -> None:
    head_dim, slots, h, w = 32, 12, 5, 6
    assert sum(axis_split(head_dim)) == head_dim
    tables = RopeTables.build(head_dim, slots, h, w, 10000.0)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(head_dim, generator=gen), torch.randn(head_dim, generator=gen)

    def score(pq: tuple[int, int, int], pk: tuple[int, int, int]) -> float:
        return float(rotated(q, tables, *pq) @ rotated(k, tables, *pk))

    # rotation keeps norms
    assert torch.allclose(rotated(q, tables, 7, 3, 2).norm(), q.norm(), atol=1e-5)
    # time axis: any shift of both positions keeps the score; other differences change it
    by_diff: dict[int, float] = {}
    for a, b in itertools.product(range(slots), repeat=2):
        s = score((a, 1, 2), (b, 1, 2))
        by_diff.setdefault(a - b, s)
        assert abs(s - by_diff[a - b]) < 1e-4, (a, b)
    values = sorted(by_diff.values())
    assert min(b - a for a, b in zip(values, values[1:], strict=False)) > 1e-6
    # spatial axes too
    for (ya, yb), dx in itertools.product([(0, 2), (1, 3), (2, 4)], [0, 1]):
        assert abs(score((3, ya, dx), (5, yb, 0)) - score((3, 0, dx), (5, 2, 0))) < 1e-4
    for xa, xb in [(0, 3), (1, 4), (2, 5)]:
        assert abs(score((0, 2, xa), (0, 2, xb)) - score((0, 2, 0), (0, 2, 3))) < 1e-4


def test_token_grid_and_rope_cover_every_token_once() -> None:
    f, y, x = token_grid(3, 2, 4)
    triples = list(zip(f.tolist(), y.tolist(), x.tolist(), strict=True))
    assert triples == [(a, b, c) for a in range(3) for b in range(2) for c in range(4)]
