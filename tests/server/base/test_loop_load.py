"""LoopLoad: the loop thread's busy share from its CPU time, and the sessions that still fit."""

from __future__ import annotations

import asyncio
import time

from server.base.loop_load import MIN_SESSION_SHARE, LoopLoad


def spin(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU (more wall time on a loaded machine)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_loop_that_spins_half_the_time_reads_about_half_busy() -> None:
    load = LoopLoad(budget=0.7, window_s=2.0)
    load.sample()
    for _ in range(10):
        spin(0.05)
        await asyncio.sleep(0.05)
        load.sample()
    assert 0.2 < load.busy < 0.55, load.busy  # 0.5 s of CPU in at least 1 s
    assert load.room(4) == int((0.7 - load.busy) / (load.busy / 4))  # at the measured cost per session


async def test_an_idle_loop_takes_sessions_and_an_empty_one_always_takes_one() -> None:
    load = LoopLoad(budget=0.7, window_s=2.0)
    load.sample()
    await asyncio.sleep(0.3)
    load.sample()
    assert load.busy < 0.05
    assert load.room(0) >= 1 and load.room(2) >= int(0.6 / max(load.busy / 2, MIN_SESSION_SHARE))
    saturated = LoopLoad(budget=0.01, window_s=2.0)
    saturated.sample()
    spin(0.2)
    saturated.sample()
    assert saturated.room(1) == 0 and saturated.room(0) == 1


def test_a_budget_of_the_whole_loop_never_refuses() -> None:
    load = LoopLoad(budget=1.0)
    load.sample()
    spin(0.1)
    load.sample()
    assert load.busy > 0.5 and load.room(100) > 1000
