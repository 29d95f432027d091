"""The engine link: warm-up at start-up, and settings that reach the engine."""

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
    from server.cli import FLAGS
    from server.session.engine_link import worker_options

    assert ("--guidance", "guidance") in [(flag, field) for flag, field, _ in FLAGS]
    settings = Settings.from_env({"AVATAR_GUIDANCE": "2"}, config="micro", warm_up=False)
    assert settings.guidance == 2.0
    options = worker_options(settings)
    assert options.guidance == 2.0 and options.config == "micro" and not options.warm_up
    assert load_core(replace(options, calibrate=())).pipe.config.audio_guidance == 2.0
    plain = worker_options(Settings(config="micro", warm_up=False))
    assert load_core(replace(plain, calibrate=())).pipe.config.audio_guidance == 1.0  # micro's own value
    with pytest.raises(ValidationError):
        Settings(guidance=-1)
