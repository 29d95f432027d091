"""Engine workers as real subprocesses (frames through shared memory, crash isolation, the
progress watchdog, workers that cannot start, no slot files left behind) and as a thread of this
process (nothing pickled, frames in memory, the same frames as a subprocess's)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

from engine.bench import speech_like
from engine.presets import Preset
from engine.service.client import EngineError
from engine.service.messages import SessionSpec
from engine.service.pool import WorkerPool
from engine.service.slots import PREFIX, SHM_DIR
from engine.service.worker import WorkerOptions

MICRO = WorkerOptions(config="micro", threads=1, warm_up=False, calibrate=(), capacity_margin=-1.0)


def my_slot_files() -> list:
    """This process's slot files made since the test began (a fixture records those before)."""
    return sorted(set(SHM_DIR.glob(f"{PREFIX}{os.getpid()}-*")) - BEFORE)


BEFORE: set = set()


@pytest.fixture(autouse=True)
def slot_files_before():
    BEFORE.clear()
    BEFORE.update(SHM_DIR.glob(f"{PREFIX}{os.getpid()}-*"))


async def feed(stream, seconds: float, seed: int = 0, start: int = 0) -> np.ndarray:
    """Push speech in 20 ms blocks, as the web process's feed clock does (all at once here)."""
    sr = stream.info.sample_rate
    pcm = speech_like(seconds, sr, seed)
    block = sr // 50
    for i in range(0, pcm.size, block):
        stream.push_audio(start + i, pcm[i:i + block])
    return pcm


async def frames(stream, count: int, timeout_s: float = 20.0) -> list:
    async def take():
        return [await stream.next_frame() for _ in range(count)]

    return await asyncio.wait_for(take(), timeout_s)


@pytest.fixture
async def pool():
    pools: list[WorkerPool] = []

    async def start(workers: int = 1, **kwargs) -> WorkerPool:
        options = kwargs.pop("options", MICRO)
        p = WorkerPool(options, workers=workers, **kwargs)
        pools.append(p)
        await p.start()
        return p

    yield start
    for p in pools:
        await p.close()


async def test_frames_come_in_order_with_their_own_audio(pool):
    p = await pool()
    assert p.info.config == "micro" and p.capacity() > 0
    stream = await p.open(SessionSpec(avatar="ben", seed=3, preset=Preset.QUALITY))
    assert len(my_slot_files()) == 1
    pcm = await feed(stream, 2.0)
    got = await frames(stream, 30)
    spf = stream.info.samples_per_frame
    assert [f.index for f in got] == list(range(30))
    assert [float(f.pts) for f in got[:3]] == [0.0, 0.04, 0.08]
    for f in got:
        assert f.rgb.shape == (32, 32, 3) and f.rgb.dtype == np.uint8
        np.testing.assert_array_equal(f.audio, pcm[f.index * spf:(f.index + 1) * spf])
    assert {f.chunk[0] for f in got} <= {"N", "I"}
    await stream.close()
    assert my_slot_files() == []


async def test_bad_session_requests_are_refused_and_the_worker_keeps_serving(pool):
    p = await pool()
    with pytest.raises(EngineError) as info:
        await p.open(SessionSpec(avatar="nobody"))
    assert info.value.code == "bad_request" and "nobody" in info.value.message
    with pytest.raises(EngineError, match="preset"):
        await p.open(SessionSpec(preset="ultra"))
    assert my_slot_files() == []
    stream = await p.open(SessionSpec(preset=Preset.QUALITY))
    await feed(stream, 1.0)
    assert [f.index for f in await frames(stream, 5)] == [0, 1, 2, 3, 4]
    await stream.close()


async def test_slots_are_recycled_over_500_chunks_and_freed(pool):
    p = await pool()
    stream = await p.open(SessionSpec(preset=Preset.QUALITY))
    info = stream.info
    spf, fed, last, chunks = info.samples_per_frame, 0, -1, set()
    while len(chunks) < 500:  # N and I chunks, each named by the frames it published (each slot reused many times)
        if fed // spf - last < 100:  # keep a few seconds of audio ahead, as a live feed would
            await feed(stream, 4.0, seed=fed, start=fed)
            fed += 4 * info.sample_rate
        frame = await asyncio.wait_for(stream.next_frame(), 20)
        assert frame.index == last + 1
        last = frame.index
        chunks.add(frame.chunk)
    assert len(my_slot_files()) == 1
    assert {name[0] for name in chunks} == {"N", "I"}
    await stream.close()
    for _ in range(5):  # sessions opened and closed leave nothing behind
        s = await p.open(SessionSpec(preset=Preset.QUALITY))
        await s.close()
    assert my_slot_files() == []


async def test_a_killed_worker_costs_only_its_own_sessions(pool):
    p = await pool(workers=2)
    opened = []
    while len({link.index for link in p.links if link.streams}) < 2:  # placement follows free capacity
        assert len(opened) < 40, "the fuller worker never got a session"
        opened.append(await p.open(SessionSpec(seed=len(opened), preset=Preset.QUALITY)))
    links = {link.index: link for link in p.links}
    on = {sid: link.index for link in p.links for sid in link.streams}
    first = opened[0]
    second = next(s for s in opened if on[s.id] != on[first.id])
    for extra in opened:
        if extra not in (first, second):
            await extra.close()
    await feed(first, 1.0)
    await feed(second, 30.0)
    await frames(first, 5)
    await frames(second, 5)
    victim = links[on[first.id]]
    pid = victim.pid
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EngineError) as info:
        await asyncio.wait_for(frames(first, 1000), 5)
    lost_after = time.monotonic() - t0
    assert info.value.code == "engine_lost" and lost_after < 2.0
    got = await frames(second, 40)  # the other worker's session streams on
    assert [f.index for f in got] == list(range(5, 45))
    fresh = await asyncio.wait_for(p.replaced.get(), 15)  # no replacement within 15 s: TimeoutError
    assert fresh.index == victim.index and fresh.alive and fresh.pid != pid
    assert p.restarts == 1 and p.lost == 1
    third = await p.open(SessionSpec(preset=Preset.QUALITY))
    await feed(third, 1.0)
    assert [f.index for f in await frames(third, 3)] == [0, 1, 2]
    for s in (first, second, third):
        await s.close()
    assert my_slot_files() == []


async def test_a_worker_that_stops_making_progress_is_replaced_from_its_measured_costs(pool):
    """The replacement starts from what the hung worker's start-up calibration measured (the same
    engine on the same machine) instead of measuring again: it reports those very costs."""
    p = await pool(options=dataclasses.replace(MICRO, calibrate=(1,)), watchdog_s=1.0)
    stream = await p.open(SessionSpec(preset=Preset.QUALITY))
    pid, measured = p.links[0].pid, p.links[0].options.calibration
    assert measured and all(seconds > 0 for points in measured.values() for seconds in points.values())
    await feed(stream, 3.0)
    await frames(stream, 1)
    os.kill(pid, signal.SIGSTOP)  # hung: alive, silent, its sessions' frames stop
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        await asyncio.wait_for(frames(stream, 1000), 10)
    assert info.value.code == "engine_lost"
    assert time.monotonic() - t0 < 5.0
    fresh = await asyncio.wait_for(p.replaced.get(), 15)
    assert fresh is p.links[0] and fresh.alive and fresh.pid != pid
    assert fresh.options.calibration == measured  # started from them, and reported them again
    assert fresh.stats.capacity == p.capacity() >= 1
    await stream.close()


async def test_a_worker_that_cannot_start_leaves_the_pool_degraded(pool):
    from dataclasses import replace

    p = await pool(options=replace(MICRO, config="no-such-config"), start_timeout_s=60)
    assert p.degraded and not p.healthy
    view = p.workers()[0]
    assert view.state == "failed" and "no-such-config" in view.error
    with pytest.raises(EngineError) as info:
        await p.open(SessionSpec(preset=Preset.QUALITY))
    assert info.value.code == "engine_unavailable"


class Unpicklable(SessionSpec):
    """A session's spec that cannot cross a pipe: pickling it raises."""

    def __reduce_ex__(self, protocol):
        raise TypeError("this spec refuses to be pickled")


async def test_the_in_process_engine_hands_the_worker_its_objects_and_frames_in_memory(pool):
    """The in-process worker gets the messages themselves (no pipe, no pickling, no writer thread)
    and writes frames into this process's memory (no slot file), and still its own copy of the
    audio: the caller's buffer may change after a push."""
    p = await pool(kind="inprocess")
    spec = Unpicklable(seed=5, preset=Preset.QUALITY)
    with pytest.raises(TypeError, match="refuses"):
        pickle.dumps(spec)
    stream = await p.open(spec)
    assert p.workers()[0].pid == os.getpid() and stream.slots.path is None
    assert my_slot_files() == []
    assert not [t.name for t in threading.enumerate() if t.name.startswith("worker-outbox")]
    pcm = await feed(stream, 1.5)
    pushed = pcm.copy()
    pcm[:] = 0  # the blocks pushed were views of this buffer
    got = await frames(stream, 20)
    spf = stream.info.samples_per_frame
    assert [f.index for f in got] == list(range(20))
    np.testing.assert_array_equal(got[7].audio, pushed[7 * spf:8 * spf])
    assert np.abs(got[19].audio).max() > 0
    await stream.close()
    assert my_slot_files() == []


async def test_in_process_and_subprocess_engines_publish_the_same_frames(pool):
    """One front end, either client: the same session and audio give the same pixels and audio."""
    published = {}
    for kind in ("subprocess", "inprocess"):
        p = await pool(kind=kind)
        stream = await p.open(SessionSpec(seed=7, preset=Preset.QUALITY))
        pcm = await feed(stream, 1.5, seed=2)
        published[kind] = await frames(stream, 24)
        await stream.close()
        await p.close()
    spf = stream.info.samples_per_frame
    for sub, inproc in zip(published["subprocess"], published["inprocess"], strict=True):
        assert (sub.index, sub.chunk) == (inproc.index, inproc.chunk)
        np.testing.assert_array_equal(sub.rgb, inproc.rgb)
        np.testing.assert_array_equal(sub.audio, inproc.audio)
        np.testing.assert_array_equal(inproc.audio, pcm[inproc.index * spf:(inproc.index + 1) * spf])
    assert len({f.rgb.tobytes() for f in published["inprocess"]}) > 1  # the avatar moves


async def test_a_stalled_worker_blocks_neither_the_loop_nor_other_sessions(pool):
    """A worker whose inbox stops being read (SIGSTOP: alive, reading nothing) while its session's
    audio keeps coming: the event loop keeps ticking within 20 ms (99% of ticks; every tick within
    0.2 s), the other worker's session keeps getting its frames, and the stalled one is lost once
    its writer gives up (2 s)."""
    p = await pool(workers=2)
    stalled = await p.open(SessionSpec(preset=Preset.QUALITY))
    other = await p.open(SessionSpec(preset=Preset.QUALITY, seed=1))
    stalled_link = next(link for link in p.links if stalled.id in link.streams)
    assert other.id not in stalled_link.streams
    await feed(other, 8.0)
    await frames(other, 1)
    sr = stalled.info.sample_rate
    os.kill(stalled_link.pid, signal.SIGSTOP)
    try:
        ticks, arrivals = [], []

        async def tick() -> None:
            while True:
                t = time.monotonic()
                await asyncio.sleep(0.001)
                ticks.append(time.monotonic() - t - 0.001)

        async def watch() -> None:
            while True:
                await other.next_frame()
                arrivals.append(time.monotonic())

        tasks = [asyncio.create_task(tick()), asyncio.create_task(watch())]
        t0 = time.monotonic()
        for i in range(40):  # 40 s of audio, 2.5 MB: far more than the socket buffers hold
            stalled.push_audio(i * sr, np.zeros(sr, np.float32))
            await asyncio.sleep(0.01)
        await asyncio.wait_for(stalled.lost.wait(), 10)
        lost_s = time.monotonic() - t0
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        os.kill(stalled_link.pid, signal.SIGKILL)
    assert stalled.error.code == "engine_lost" and 2.0 <= lost_s < 5.0, lost_s
    # A blocking write held the loop for the whole 2 s deadline; a machine shared with other jobs
    # can deschedule this process for a few tens of ms, which the 99th percentile leaves out.
    lag = np.array(ticks)
    p99 = np.percentile(lag, 99)
    gaps = np.diff([t0, *arrivals])
    print(f"stalled worker: event-loop lag p99 {p99 * 1000:.1f} ms, max {lag.max() * 1000:.1f} ms over {lag.size} "
          f"ticks; the other session got {len(arrivals)} frames, largest gap {gaps.max() * 1000:.0f} ms; "
          f"the stalled session lost after {lost_s:.2f} s")
    assert p99 < 0.02 and lag.max() < 0.2, f"event loop lag p99 {p99 * 1000:.0f} ms, max {lag.max() * 1000:.0f} ms"
    assert len(arrivals) >= 25 and gaps.max() < 0.5, (len(arrivals), gaps.max())
    await other.close()
