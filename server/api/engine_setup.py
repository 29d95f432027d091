"""The engine the settings name: the options each worker builds and the client that runs them.

Kept at the top, beside the adapter over the engine (``server.api.engine_adapter``), because it
reads the server's settings, which the engine must not know.
"""

from __future__ import annotations

from engine.parallel.plan import ParallelPlan
from engine.service.client import EngineClient
from engine.service.pool import WorkerPool, worker_devices
from engine.service.worker import WorkerOptions
from server.config import Settings

__all__ = ["WorkerPool", "engine_client", "worker_devices", "worker_options"]


def worker_options(settings: Settings) -> WorkerOptions:
    """What each engine worker builds; ``ValueError`` for a parallel plan that cannot work."""
    engine, node = settings.engine, settings.node
    plan = ParallelPlan(sequence=engine.sequence_parallel, pipeline=engine.pipeline_parallel,
                        shard=engine.shard, offload=engine.offload)
    return WorkerOptions(config=engine.config, device=engine.device, threads=engine.engine_threads,
                         guidance=engine.guidance, warm_up=engine.warm_up,
                         default_preset=settings.session.default_quality, drawn=settings.session.drawn,
                         settle_s=engine.engine_settle_s, capacity_margin=engine.engine_capacity_margin,
                         parallel=None if plan.single else plan,
                         socket_dir=node.node_sockets, key=bytes.fromhex(node.node_key or ""))


def engine_client(settings: Settings) -> EngineClient:
    """The engine the settings name: ``engine_workers`` subprocess workers (default one per
    device), one in-process worker thread with ``engine = "inprocess"``, or the node's shared
    workers at ``node_sockets`` with ``engine = "node"``."""
    return WorkerPool(worker_options(settings), workers=settings.engine.engine_workers, kind=settings.engine.engine)
