"""The engine the settings name: the options each worker builds and the client that runs them.

Kept above the engine port (``server.base.engine_link``) because it reads the server's
settings, which the port must not know.
"""

from __future__ import annotations

from server.base.engine_link import EngineClient, ParallelPlan, WorkerOptions, WorkerPool
from server.config import Settings


def worker_options(settings: Settings) -> WorkerOptions:
    """What each engine worker builds; ``ValueError`` for a parallel plan that cannot work."""
    plan = ParallelPlan(sequence=settings.sequence_parallel, pipeline=settings.pipeline_parallel,
                        shard=settings.shard, offload=settings.offload)
    return WorkerOptions(config=settings.config, device=settings.device, threads=settings.engine_threads,
                         guidance=settings.guidance, warm_up=settings.warm_up, default_preset=settings.default_quality,
                         drawn=settings.drawn, settle_s=settings.engine_settle_s,
                         parallel=None if plan.single else plan, socket_dir=settings.node_sockets,
                         key=bytes.fromhex(settings.node_key or ""))


def engine_client(settings: Settings) -> EngineClient:
    """The engine the settings name: ``engine_workers`` subprocess workers (default one per
    device), one in-process worker thread with ``engine = "inprocess"``, or the node's shared
    workers at ``node_sockets`` with ``engine = "node"``."""
    return WorkerPool(worker_options(settings), workers=settings.engine_workers, kind=settings.engine)
