"""The server's engine ports: what the server reads of the engine's values is there on the engine's
own, and the server's engine errors carry what the API answers with."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from engine.frames import PublishedFrame as EngineFrame
from engine.service.client import QualityEvent
from engine.service.messages import EngineInfo as EngineInfoMessage
from server.base import engine_port
from server.base.engine_port import EngineError, ImageBounds, ImageTooLargeError, UnusableImage


def members(protocol: type) -> set[str]:
    """The names a protocol declares (its properties and methods), its own only."""
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_engines_frame_has_all_the_server_reads_of_a_frame() -> None:
    frame = EngineFrame(3, 25, np.zeros((4, 4, 3), np.uint8), np.zeros(640, np.float32), 16000, "N1")
    wanted = members(engine_port.PublishedFrame)
    assert wanted == {"index", "fps", "rgb", "audio", "sample_rate", "chunk", "pts", "sample_index"}
    assert all(hasattr(frame, name) for name in wanted)
    assert (frame.pts, frame.sample_index) == (Fraction(3, 25), 3 * 640)


def test_the_engines_info_and_quality_changes_have_all_the_server_reads() -> None:
    info_fields = {f.name for f in dataclasses.fields(EngineInfoMessage)}
    assert members(engine_port.EngineInfo) <= info_fields
    assert members(engine_port.QualityChange) == {f.name for f in dataclasses.fields(QualityEvent)}


def test_each_pipeline_reaches_only_its_end_of_the_session_engine() -> None:
    into, out = members(engine_port.EngineInput), members(engine_port.EngineOutput)
    assert into == {"info", "first_chunk_samples", "lookahead_samples", "feed", "silence_from"}
    assert {"deliver", "set_origin", "quality_changes", "nbytes", "close"} <= out
    assert not (into - {"info"}) & out  # the two pipelines share only the engine's rates
    assert members(engine_port.SessionEngine) == {"drawn"}


def test_engine_errors_carry_the_api_code_message_and_retry_time() -> None:
    with pytest.raises(EngineError) as caught:
        raise EngineError("at_capacity", "every worker is full", retry_after_s=7)
    assert (caught.value.code, caught.value.message, caught.value.retry_after_s) == (
        "at_capacity", "every worker is full", 7)
    assert str(caught.value) == "every worker is full" and EngineError("x", "y").retry_after_s == 5
    assert issubclass(ImageTooLargeError, UnusableImage) and issubclass(UnusableImage, ValueError)


def test_image_bounds_are_a_frozen_value() -> None:
    bounds = ImageBounds(max_side=4096, max_pixels=1 << 24, min_side=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bounds.min_side = 1  # type: ignore[misc]
    assert bounds == ImageBounds(4096, 1 << 24, 64)
