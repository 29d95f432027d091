"""Sequence parallelism over two gloo ranks: every chunk's tokens split between them, Ulysses
attention, RoPE looked up per rank from the global time index. Sessions over N and I chunks
(batched, guided) and chunks past latent 10**6 come out as on one device, with frames whose
tokens divide by the ranks and with frames whose tokens need padding."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from parallel_helpers import (
    MILLION,
    TOLERANCE,
    OneDevice,
    assert_same_run,
    chunks_at_a_million,
    max_diff,
    run_sessions,
    save_living,
)

from engine.bench import speech_like
from engine.config import get_config
from engine.modules.dit import token_grid
from engine.parallel.build import build_pipeline
from engine.parallel.plan import ParallelPlan
from engine.parallel.sequence import UlyssesShard
from engine.pipeline import Pipeline
from engine.schedule import ChunkSchedule

# Outputs compared with one device's, nothing timed: `make test` runs it beside another test.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.offline]


def wide_micro():
    """``micro`` at 48x48: 3x3 = 9 tokens a frame, which two ranks share as 5 and 4 (+1 padding)."""
    cfg = get_config("micro")
    return cfg.replace(name="micro-wide", vae=dataclasses.replace(cfg.vae, height=48, width=48))


@pytest.fixture(scope="module", params=["micro", "padded"])
def engines(request, micro_weights: Path, tmp_path_factory: pytest.TempPathFactory):
    if request.param == "micro":
        config, weights = "micro", micro_weights
    else:
        config = wide_micro()
        weights = save_living(config, tmp_path_factory.mktemp("wide_micro"), seed=6)
    build = dict(name=config, weights=str(weights), threads=1, guidance=2.0)
    parallel = build_pipeline(ParallelPlan(sequence=2), **build)
    yield parallel, Pipeline.from_config(**build)
    assert parallel.close() == [0]


def test_sessions_over_n_and_i_chunks_equal_one_device(engines, monkeypatch: pytest.MonkeyPatch) -> None:
    parallel, single = engines
    got, want = run_sessions(parallel, monkeypatch), run_sessions(single, monkeypatch)
    assert_same_run(got, want)


def test_each_rank_holds_its_tokens_of_the_rolling_state(engines) -> None:
    parallel, single = engines
    a, b = parallel.open_session(avatar="cleo"), single.open_session(avatar="cleo")
    per_frame = single.models.dit.tokens_per_frame
    share = -(-per_frame // 2)
    assert a.state.reference.kv.k.shape[2] == share and b.state.reference.kv.k.shape[2] == per_frame
    for s in (a, b):
        s.feed(speech_like(1.0, 16000))
        s.step()
    ha, hb = a.state.history.kv, b.state.history.kv
    assert ha.frames() == hb.frames()
    assert ha.k.shape[2] == len(ha.frames()) * share
    # rank 0 holds the first share of every frame's tokens, as one device holds them
    mine = hb.k.reshape(*hb.k.shape[:2], len(hb.frames()), per_frame, *hb.k.shape[3:])[:, :, :, :share]
    assert (mine.reshape(ha.k.shape) - ha.k).abs().max() <= TOLERANCE
    assert ha.k.abs().max() > 0.1


def test_chunks_past_a_million_latents_equal_one_device_and_the_stream_start(engines) -> None:
    parallel, single = engines
    got = parallel.call(chunks_at_a_million)
    assert max_diff(got[0], got[1]) == 0.0  # every rank ends with the same latents
    want = chunks_at_a_million(OneDevice(single))
    near = chunks_at_a_million(OneDevice(single), k=2)
    assert max_diff(got[0], want) <= TOLERANCE
    assert max_diff(got[0], near) <= TOLERANCE  # RoPE by window slot: position 10**6 is the start again
    assert ChunkSchedule(single.config.schedule).n_chunk(MILLION // 3).span[0] > MILLION - 3


@pytest.mark.parametrize("height, width, world", [(2, 2, 2), (2, 3, 4), (30, 52, 8)])
def test_ranks_share_every_token_of_a_frame_once(height: int, width: int, world: int) -> None:
    """Each token on exactly one rank, at its own position; padding where a frame's tokens do
    not divide by the ranks (6 over 4, 1560 over 8 do not pad: 2 each, 195 each)."""
    per_frame, frames = height * width, 2
    tokens = torch.arange(frames * per_frame, dtype=torch.float32).reshape(1, frames, per_frame, 1)
    position = list(zip(*(t.tolist() for t in token_grid(frames, height, width)), strict=True))
    held: list[int] = []
    for rank in range(world):
        shard = UlyssesShard(rank, world, heads=world, per_frame=per_frame)
        f, y, x = shard.positions(frames, height, width)
        real = (torch.arange(rank * shard.share, (rank + 1) * shard.share) < per_frame).repeat(frames)
        values = [int(v) for v in shard.local(tokens).reshape(-1)[real]]
        assert list(zip(f[real].tolist(), y[real].tolist(), x[real].tolist(), strict=True)) == \
            [position[v] for v in values]
        held += values
    assert sorted(held) == list(range(frames * per_frame))


def test_heads_must_divide_by_the_ranks() -> None:
    with pytest.raises(ValueError, match="heads"):
        UlyssesShard(0, 2, heads=3, per_frame=64)
