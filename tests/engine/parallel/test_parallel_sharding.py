"""FSDP2 over two gloo ranks: the DiT's block weights sharded, each block gathered just before
it runs (the next one prefetched) and resharded after; alone and under sequence parallelism.
Sessions (N and I chunks, batched, guided) and chunks past latent 10**6 come out as on one
device. The 14B-shaped ``xl`` DiT is sharded on the meta device only: shapes, no weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parallel_helpers import OneDevice, assert_same_run, chunks_at_a_million, max_diff, run_sessions

from engine.config import get_config
from engine.modules.dit import A2VDiT
from engine.parallel.build import build_pipeline
from engine.parallel.plan import ParallelPlan
from engine.parallel.sharding import local_numel, shard_dit
from engine.pipeline import Pipeline

# Outputs compared with one device's, nothing timed: `make test` runs it beside another test.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.offline]
TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=[ParallelPlan(shard=2), ParallelPlan(sequence=2, shard=2)],
                ids=["shard", "sequence+shard"])
def engines(request, micro_weights: Path):
    build = dict(name="micro", weights=str(micro_weights), threads=1, guidance=2.0)
    parallel = build_pipeline(request.param, **build)
    yield parallel, Pipeline.from_config(**build)
    assert parallel.close() == [0]


def held(context) -> dict:
    dit = context.pipe.models.dit
    return {"blocks": sum(local_numel(b) for b in dit.blocks), "embed": local_numel(dit.patch_embed),
            "sharded": type(dit.blocks[0].qkv.weight).__name__}


def prefetches(context) -> dict:
    """(On every rank) which blocks' all-gathers a forward starts ahead of time, and whether every
    block is back to its shard afterwards. FSDP2's own prefetch hook is watched (private API)."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    dit = context.pipe.models.dit
    index = {id(b._get_fsdp_state()._fsdp_param_group): i for i, b in enumerate(dit.blocks)}
    seen: list[int | None] = []
    original = FSDPParamGroup._prefetch_unshard

    def watched(group, pass_type):
        seen.append(index.get(id(group)))
        return original(group, pass_type)

    FSDPParamGroup._prefetch_unshard = staticmethod(watched)
    try:
        with torch.inference_mode():
            dit.encode_reference(torch.randn(1, dit.config.vae.latent_channels, *dit.grid,
                                             generator=torch.Generator().manual_seed(1)))
    finally:
        FSDPParamGroup._prefetch_unshard = staticmethod(original)
    return {"prefetched": seen, "resharded": all(type(b.qkv.weight).__name__ == "DTensor" for b in dit.blocks)}


def xl_shards(context) -> dict:
    """(On every rank) the xl DiT built on the meta device and sharded over the ranks."""
    with torch.device("meta"):
        dit = A2VDiT(get_config("xl"))
    total = sum(p.numel() for p in dit.blocks.parameters())
    shard_dit(dit, "cpu")
    return {"total": total, "held": sum(local_numel(b) for b in dit.blocks),
            "embed": local_numel(dit.patch_embed), "device": str(dit.blocks[0].qkv.weight.to_local().device)}


def test_sessions_equal_one_device(engines, monkeypatch) -> None:
    parallel, single = engines
    got, want = run_sessions(parallel, monkeypatch), run_sessions(single, monkeypatch)
    assert_same_run(got, want)


def test_each_rank_holds_half_of_every_block(engines) -> None:
    parallel, single = engines
    whole = sum(p.numel() for p in single.models.dit.blocks.parameters())
    ranks = parallel.call(held)
    assert [r["sharded"] for r in ranks] == ["DTensor", "DTensor"]
    assert sum(r["blocks"] for r in ranks) == whole and all(r["blocks"] <= whole // 2 + 64 for r in ranks)
    embed = sum(p.numel() for p in single.models.dit.patch_embed.parameters())
    assert all(r["embed"] == embed for r in ranks)  # the DiT's own small layers stay whole


def test_each_block_prefetches_the_next_and_reshards_after_forward(engines) -> None:
    parallel, single = engines
    depth = len(single.models.dit.blocks)
    for rank in parallel.call(prefetches):
        assert rank == {"prefetched": list(range(1, depth)), "resharded": True}


def test_chunks_past_a_million_latents_equal_one_device(engines) -> None:
    parallel, single = engines
    got = parallel.call(chunks_at_a_million)
    assert max_diff(got[0], got[1]) == 0.0
    assert max_diff(got[0], chunks_at_a_million(OneDevice(single))) <= TOLERANCE


def test_xl_is_14b_and_shards_in_halves_on_the_meta_device(engines) -> None:
    parallel, _ = engines
    ranks = parallel.call(xl_shards)
    total = ranks[0]["total"]
    assert 13e9 < total < 15e9
    assert [r["device"] for r in ranks] == ["meta", "meta"]
    assert sum(r["held"] for r in ranks) == total and abs(ranks[0]["held"] - ranks[1]["held"]) < 1e6
    assert ranks[0]["embed"] == 16 * 5120 + 5120  # the patch embedding stays whole
