"""The ranks of an engine spread over two gloo ranks end with it: cleanly when it closes (a
bench session or the worker is done), at once when one of them dies (rank 0 raises
``RanksLost``; in an engine worker, the worker ends and its sessions get ``engine_lost``), and
a rank whose rank 0 is killed exits by itself."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from engine.bench import speech_like
from engine.parallel.build import build_pipeline
from engine.parallel.plan import ParallelPlan
from engine.parallel.ranks import RanksLost
from engine.presets import Preset
from engine.service.client import EngineError
from engine.service.messages import SessionSpec
from engine.service.pool import WorkerPool
from engine.service.worker import WorkerOptions

pytestmark = pytest.mark.usefixtures("one_thread")
PLAN = ParallelPlan(sequence=2)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def wait_until(condition, timeout_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout_s, what
        time.sleep(0.02)
    return time.monotonic() - t0


@pytest.fixture
def engine(micro_weights: Path):
    pipe = build_pipeline(PLAN, name="micro", weights=str(micro_weights), threads=1)
    yield pipe
    pipe.close()


def speaking(pipe):
    session = pipe.open_session(avatar="ada")
    session.feed(speech_like(4.0, 16000))
    return session


def test_ranks_end_cleanly_when_the_engine_closes(engine) -> None:
    session = speaking(engine)
    assert session.step()
    pids = engine.mirror.channel.pids
    assert len(pids) == 1 and running(pids[0])
    assert engine.close() == [0]  # the other rank left its loop and the group by itself
    assert not running(pids[0]) and not dist.is_initialized()
    with pytest.raises(RanksLost, match="shut down"):
        session.step()


def test_a_rank_that_dies_mid_session_ends_the_engine_at_once(engine, micro_weights: Path) -> None:
    session = speaking(engine)
    assert session.step()
    os.kill(engine.mirror.channel.pids[0], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(RanksLost, match="rank 1"):
        while True:  # the next chunk's collectives find the rank gone
            session.step()
    assert time.monotonic() - t0 < 5
    with pytest.raises(RanksLost):
        engine.check()
    assert not dist.is_initialized()
    again = build_pipeline(PLAN, name="micro", weights=str(micro_weights), threads=1)  # the process can start anew
    try:
        assert speaking(again).step()
    finally:
        assert again.close() == [0]


def test_a_rank_that_dies_while_idle_is_noticed(engine) -> None:
    speaking(engine).step()
    os.kill(engine.mirror.channel.pids[0], signal.SIGKILL)

    def lost() -> bool:
        try:
            engine.check()
        except RanksLost:
            return True
        return False

    assert wait_until(lost, 5, "the dead rank was not noticed") < 5


# ---- ranks launched by an engine worker ------------------------------------------------------


@pytest.fixture
async def worker(micro_weights: Path):
    options = WorkerOptions(config="micro", weights=str(micro_weights), threads=1, warm_up=False, calibrate=(),
                            parallel=PLAN)
    pool = WorkerPool(options, workers=1, restart=False)
    await pool.start()
    assert pool.links[0].alive, pool.links[0].error
    yield pool
    await pool.close()


async def streaming(pool: WorkerPool):
    stream = await pool.open(SessionSpec(avatar="ben", seed=2, preset=Preset.QUALITY))
    pcm = speech_like(4.0, stream.info.sample_rate)
    for i in range(0, pcm.size, 320):
        stream.push_audio(i, pcm[i:i + 320])
    got = [await asyncio.wait_for(stream.next_frame(), 30) for _ in range(10)]
    assert [f.index for f in got] == list(range(10))
    return stream


async def test_a_worker_whose_rank_dies_reports_engine_lost(worker: WorkerPool) -> None:
    stream = await streaming(worker)
    pid = worker.links[0].pid
    (rank,) = children(pid)
    os.kill(rank, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        while True:
            await asyncio.wait_for(stream.next_frame(), 10)
    assert info.value.code == "engine_lost" and time.monotonic() - t0 < 5
    await asyncio.to_thread(wait_until, lambda: not running(pid), 10, "the worker outlived its rank")


async def test_a_rank_exits_when_its_worker_is_killed(worker: WorkerPool) -> None:
    stream = await streaming(worker)
    (rank,) = children(worker.links[0].pid)
    os.kill(worker.links[0].pid, signal.SIGKILL)
    with pytest.raises(EngineError):
        while True:
            await asyncio.wait_for(stream.next_frame(), 10)
    assert await asyncio.to_thread(wait_until, lambda: not running(rank), 5, "the rank outlived its worker") < 5


async def test_ranks_end_with_their_worker(worker: WorkerPool) -> None:
    stream = await streaming(worker)
    pid = worker.links[0].pid
    (rank,) = children(pid)
    await stream.close()
    await worker.close()
    await asyncio.to_thread(wait_until, lambda: not running(rank) and not running(pid), 10, "ranks left behind")
