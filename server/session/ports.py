"""What each of a session's pipelines needs of the engine link: the ports a test fills with fakes."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from server.base.engine_link import EngineInfo


class EngineInput(Protocol):
    """The audio-in pipeline's end: the engine's rates, and a timeline to feed and silence."""

    @property
    def info(self) -> EngineInfo: ...

    def feed(self, start: int, samples: np.ndarray) -> None: ...

    def silence_from(self, sample: int) -> None: ...


class EngineOutput(Protocol):
    """The video-out pipeline's start: the engine's rates, and where playout's clock is told."""

    @property
    def info(self) -> EngineInfo: ...

    def set_origin(self, origin: float | None) -> None: ...
