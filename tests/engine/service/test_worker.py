"""What a worker keeps free of each chunk period when it counts its capacity."""

from __future__ import annotations

import os

from engine.service.worker import WorkerOptions


def test_the_capacity_margin_follows_whether_the_web_process_shares_the_engines_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert WorkerOptions(device="cpu", threads=None).margin == 0.35  # torch takes every core
    assert WorkerOptions(device="cpu", threads=cores).margin == 0.35
    if cores > 1:  # the default: all cores but one, the last one the web process's own
        assert WorkerOptions(device="cpu", threads=cores - 1).margin == 0.2
    assert WorkerOptions(device="cuda", threads=None).margin == 0.2
    assert WorkerOptions(device="cpu", capacity_margin=0.5).margin == 0.5
