"""The engine the settings name: warm-up at start-up, and settings that reach the engine's workers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from server.config import Settings


async def test_server_warms_the_engine_up_before_it_serves(caplog: pytest.LogCaptureFixture) -> None:
    """At start-up the worker runs one silent session (the first user's first chunk then runs on
    warm kernels) before it reports ready; ``warm_up: false`` skips it."""
    import logging

    from server_helpers import engine_pipeline, loaded_engine, make_settings

    from server.api.app import create_app

    pipe = engine_pipeline("micro")
    for enabled in (True, False):
        caplog.clear()
        app = create_app(make_settings(warm_up=enabled), loaded_engine("micro", warm_up=enabled))
        with caplog.at_level(logging.INFO, logger="engine.service.worker"):
            async with app.router.lifespan_context(app):
                assert app.state.manager.engine.available
        warmed = [r.getMessage() for r in caplog.records if "warmed up" in r.getMessage()]
        assert len(warmed) == (1 if enabled else 0), warmed
        if enabled:
            frames = int(warmed[0].split(": ")[1].split()[0])
            assert frames >= 2 * pipe.frames_per_chunk


def test_guidance_setting_reaches_the_engine() -> None:
    from engine.service.worker import load_core
    from server.api.engine_setup import worker_options
    from server.cli import FLAGS

    assert ("--guidance", "guidance") in [(flag, field) for flag, field, _ in FLAGS]
    settings = Settings.from_env({"AVATAR_GUIDANCE": "2"}, config="micro", warm_up=False)
    assert settings.engine.guidance == 2.0
    options = worker_options(settings)
    assert options.guidance == 2.0 and options.config == "micro" and not options.warm_up
    assert load_core(replace(options, calibrate=())).pipe.config.audio_guidance == 2.0
    plain = worker_options(Settings(config="micro", warm_up=False))
    assert load_core(replace(plain, calibrate=())).pipe.config.audio_guidance == 1.0  # micro's own value
    with pytest.raises(ValidationError):
        Settings(guidance=-1)


def test_parallel_flags_give_each_worker_a_plan_and_a_group_of_devices(capsys) -> None:
    """``--sequence-parallel 2`` on 8 GPUs: four workers, on cuda:0, :2, :4, :6 (each worker's
    ranks on the next device); a plan no engine can run is one line and exit 2."""
    from engine.parallel.plan import ParallelPlan
    from server.api.engine_setup import worker_devices, worker_options
    from server.cli import main as cli_main

    assert worker_options(Settings()).parallel is None
    options = worker_options(Settings(device="cuda", sequence_parallel=2))
    assert options.parallel == ParallelPlan(sequence=2)
    gpus = [f"cuda:{i}" for i in range(8)]
    assert worker_devices(options, gpus) == ["cuda:0", "cuda:2", "cuda:4", "cuda:6"]
    assert worker_devices(options, gpus[:5]) == ["cuda:0", "cuda:2"]  # the fifth one idles
    assert worker_devices(worker_options(Settings(device="cuda")), gpus[:3]) == gpus[:3]
    assert worker_devices(worker_options(Settings(sequence_parallel=2)), []) == ["cpu"]  # CPU ranks share it
    with pytest.raises(ValueError, match="needs 2 CUDA devices; this machine has 1"):
        worker_devices(options, gpus[:1])
    assert cli_main(["serve", "--port", "0", "--pipeline-parallel", "2", "--shard", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pipeline parallelism does not combine" in err[0], err


def test_capacity_margin_setting_reaches_the_workers_count() -> None:
    """A margin from the settings replaces the worker's default; below 0 a worker counts room for
    sessions its live estimate says it cannot hold, so only ``max_sessions`` bounds them."""
    from server.api.engine_setup import worker_options

    settings = Settings.from_env({"AVATAR_ENGINE_CAPACITY_MARGIN": "0.5"}, config="micro", warm_up=False)
    assert worker_options(settings).margin == 0.5
    assert worker_options(Settings(config="micro")).margin in (0.2, 0.35)
    assert worker_options(Settings(config="micro", engine_capacity_margin=-1)).margin == -1
    with pytest.raises(ValidationError):
        Settings(engine_capacity_margin=1.0)
