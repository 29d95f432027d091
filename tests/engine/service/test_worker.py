"""What a worker keeps free of each chunk period when it counts its capacity, and what it measures."""

from __future__ import annotations

import os

from engine.batch import Render
from engine.service.core import EngineCore
from engine.service.costs import CostModel
from engine.service.worker import WorkerOptions, calibrate, describe


def test_the_capacity_margin_follows_whether_the_web_process_shares_the_engines_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert WorkerOptions(device="cpu", threads=None).margin == 0.35  # torch takes every core
    assert WorkerOptions(device="cpu", threads=cores).margin == 0.35
    if cores > 1:  # the default: all cores but one, the last one the web process's own
        assert WorkerOptions(device="cpu", threads=cores - 1).margin == 0.2
    assert WorkerOptions(device="cuda", threads=None).margin == 0.2
    assert WorkerOptions(device="cpu", capacity_margin=0.5).margin == 0.5


def test_calibration_measures_every_render_kind_of_the_default_preset(micro_pipe) -> None:
    core = EngineCore(micro_pipe, describe(micro_pipe), costs=CostModel(), default_render=Render.DRAWN)
    calibrate(core, (1,), rounds=1)
    renders = [key.split("/")[-1] for key in core.costs.snapshot()["costs"]]
    # the worker's way for both presets (the quality preset adds its I chunks), the others for the default
    assert sorted(renders) == ["decoded", "drawn", "drawn", "drawn", "photo"]
    assert not core.sessions  # the calibration sessions are closed
    assert core.real_time_by_render().keys() == {"decoded", "drawn", "photo"}
