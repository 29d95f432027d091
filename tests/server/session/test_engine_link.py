"""The engine link: warm-up at start-up, and settings that reach the engine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.config import Settings


async def test_server_warms_the_engine_up_before_it_serves(caplog: pytest.LogCaptureFixture) -> None:
    """At start-up the app runs one silent session through the default preset's engine (the
    first user's first chunk then runs on warm kernels); ``warm_up: false`` skips it."""
    import logging

    from server_helpers import engine_pipeline, loaded_engine, make_settings

    from engine.pipeline import warm_up
    from server.api.app import create_app

    pipe = engine_pipeline("micro")
    assert warm_up(pipe) >= 2 * pipe.frames_per_chunk
    for enabled in (True, False):
        caplog.clear()
        app = create_app(make_settings(warm_up=enabled), loaded_engine("micro"))
        with caplog.at_level(logging.INFO, logger="server.api.app"):
            async with app.router.lifespan_context(app):
                assert app.state.manager is not None
        warmed = [r.getMessage() for r in caplog.records if "warmed up" in r.getMessage()]
        assert len(warmed) == (1 if enabled else 0), warmed
        if enabled:
            frames = int(warmed[0].split(": ")[1].split()[0])
            assert frames >= 2 * pipe.frames_per_chunk


def test_guidance_setting_reaches_the_engine() -> None:
    from server.cli import FLAGS
    from server.session.engine_link import load_pipeline

    assert ("--guidance", "guidance") in [(flag, field) for flag, field, _ in FLAGS]
    settings = Settings.from_env({"AVATAR_GUIDANCE": "2"}, config="micro")
    assert settings.guidance == 2.0
    assert load_pipeline(settings).config.audio_guidance == 2.0
    assert load_pipeline(Settings(config="micro")).config.audio_guidance == 1.0  # micro's own value
    with pytest.raises(ValidationError):
        Settings(guidance=-1)
