"""Building an engine by a ``ParallelPlan``: one process (offload, a decoder device of its
own) or several ranks, each with its share of the DiT."""

from __future__ import annotations

from dataclasses import dataclass

from engine.parallel.disaggregate import DisaggregatedPipeline
from engine.parallel.mirror import FollowerPipeline, Mirror, MirroredPipeline
from engine.parallel.offload import Offloader
from engine.parallel.pipeline_stages import StagePipeline, measure_and_rebalance
from engine.parallel.plan import ParallelPlan
from engine.parallel.ranks import RankGroup, RankSpec
from engine.parallel.sequence import UlyssesShard
from engine.parallel.sharding import shard_dit
from engine.pipeline import Pipeline


@dataclass
class RankContext:
    """One rank's share of the engine, as functions run on every rank (``MirroredPipeline.call``)
    receive it."""

    rank: int
    world: int
    device: str
    plan: ParallelPlan
    pipe: Pipeline


def distribute(pipe: Pipeline, plan: ParallelPlan, rank: int, device: str) -> None:
    """Give this rank's DiT its share: weight shards, a slice of every frame's tokens, or its
    stage of blocks."""
    dit = pipe.models.dit
    world = plan.world_size
    if plan.shard > 1:
        shard_dit(dit, device)
    if plan.sequence > 1:
        dit.shard = UlyssesShard(rank, world, dit.config.dit.heads, dit.tokens_per_frame)
    if plan.pipeline > 1:
        dit.trunk = StagePipeline(dit, rank, world, plan.boundaries, plan.microbatches)


def local_pipeline(plan: ParallelPlan, device: str, build: dict, follower: bool = False) -> Pipeline:
    """This process's pipeline: rank 0's publishes frames (on ``decoder_device`` if the plan
    names one), the other ranks' only keep count."""
    if follower:
        return FollowerPipeline.from_config(device=device, **build)
    if plan.decoder_device is not None:
        pipe = DisaggregatedPipeline.from_config(device=device, **build)
        pipe.place_decoder(plan.decoder_device)
        return pipe
    return Pipeline.from_config(device=device, **build)


def build_rank(spec: RankSpec, rank: int) -> RankContext:
    device = spec.devices[rank]
    pipe = local_pipeline(spec.plan, device, spec.build, follower=rank > 0)
    distribute(pipe, spec.plan, rank, device)
    return RankContext(rank, spec.world_size, device, spec.plan, pipe)


def build_pipeline(plan: ParallelPlan, device: str = "cpu", **build: object) -> Pipeline | MirroredPipeline:
    """The engine ``plan`` describes, with ``Pipeline.from_config`` keywords (``name``, ``weights``,
    ``steps``, ``threads``, ...). Several ranks: started here, as subprocesses of this process;
    ``close()`` the result to end them. Pipeline stages without given boundaries are balanced
    from a short measured run first."""
    if plan.world_size == 1:
        pipe = local_pipeline(plan, device, build)
        if plan.offload:
            Offloader.install(pipe)
        return pipe
    spec = RankSpec(plan, dict(build), plan.devices(device))
    group = RankGroup(spec)
    try:
        context = build_rank(spec, 0)
        group.ready()
    except BaseException:
        group.abort("rank 0 could not build its share")
        raise
    pipe = MirroredPipeline(context.pipe, Mirror(group, context))
    if plan.pipeline > 1 and plan.boundaries is None:
        try:
            measure_and_rebalance(pipe)
        except BaseException:
            pipe.close()
            raise
    return pipe
