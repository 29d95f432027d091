"""LoopLoad: the loop thread's busy share from its CPU time, and the sessions that still fit."""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.base.loop_load import MIN_SESSION_SHARE, LoopLoad


@dataclass
class Clocks:
    """Wall and thread CPU seconds, moved by hand."""

    wall: float = 0.0
    cpu: float = 0.0

    def run(self, wall: float, busy: float) -> None:
        self.wall += wall
        self.cpu += wall * busy


def sampled(budget: float, busy: float, seconds: float = 4.0, window_s: float = 2.0) -> LoopLoad:
    clocks = Clocks()
    load = LoopLoad(budget, window_s=window_s, clock=lambda: clocks.wall, cpu=lambda: clocks.cpu)
    load.sample()
    for _ in range(int(seconds / 0.25)):
        clocks.run(0.25, busy)
        load.sample()
    return load


def test_the_busy_share_is_the_last_windows_cpu_over_its_wall_time():
    clocks = Clocks()
    load = LoopLoad(0.7, window_s=2.0, clock=lambda: clocks.wall, cpu=lambda: clocks.cpu)
    assert load.busy == 0.0  # nothing measured yet
    load.sample()
    for busy in [0.9] * 8 + [0.3] * 12:  # 2 s at 0.9, then 3 s at 0.3: the window holds only the latter
        clocks.run(0.25, busy)
        load.sample()
    assert abs(load.busy - 0.3) < 1e-9


def test_the_room_left_is_the_budget_over_the_measured_cost_per_session():
    load = sampled(0.75, busy=0.5)  # binary fractions: the arithmetic is exact
    assert load.room(4) == 2  # 0.125 each: (0.75 - 0.5) / 0.125
    assert load.room(8) == 4  # 0.0625 each
    assert sampled(0.75, busy=0.875).room(4) == 0  # over budget
    idle = sampled(0.7, busy=0.002)
    assert idle.room(2) == int((0.7 - 0.002) / MIN_SESSION_SHARE)  # no less than MIN_SESSION_SHARE a session


def test_an_empty_process_always_takes_one_and_a_whole_loop_budget_never_refuses():
    assert sampled(0.01, busy=0.5).room(0) == 1 and sampled(0.01, busy=0.5).room(1) == 0
    assert sampled(1.0, busy=0.99).room(100) > 1000


def test_the_real_clocks_see_this_thread_spin():
    load = LoopLoad(0.7)
    load.sample()
    end = time.thread_time() + 0.1
    while time.thread_time() < end:  # 0.1 s of this thread's CPU (more wall time on a loaded machine)
        pass
    load.sample()
    assert 0.2 < load.busy <= 1.01, load.busy
