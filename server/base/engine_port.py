"""The engine as the server's lower layers see it: the values that cross from it and the ports a
session's pipelines drive, all owned by the server and none importing the engine.

The engine runs in its own worker processes, reached through one ``EngineClient``; the concrete
adapter over it (``server.api.engine_adapter``) is built at the top and handed down. :class:`Engine`
is the server's view of it (what it draws, opening sessions, reference-image preparation);
:class:`SessionEngine` one session's engine, split by the pipeline that drives it: the audio-in
pipeline feeds :class:`EngineInput`, the video-out pipeline takes frames from :class:`EngineOutput`
into a :class:`FrameSink`. The engine's own values (its frames, its figures, its quality changes)
are read through the protocols below, by what the server reads of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from server.base.local_engine import LocalEngine


class PublishedFrame(Protocol):
    """A finished video frame on the session's media timeline, with the audio that drove it."""

    @property
    def index(self) -> int: ...  # the global video frame number

    @property
    def fps(self) -> int: ...

    @property
    def rgb(self) -> np.ndarray: ...  # (H, W, 3) uint8

    @property
    def audio(self) -> np.ndarray: ...  # (sample_rate // fps,) float32 in [-1, 1]

    @property
    def sample_rate(self) -> int: ...

    @property
    def chunk(self) -> str: ...  # which chunk produced it, e.g. "N3" or "I2"

    @property
    def pts(self) -> Fraction: ...

    @property
    def sample_index(self) -> int: ...


class EngineInfo(Protocol):
    """What the server knows of the engine it serves: its rates and what it draws."""

    @property
    def config(self) -> str: ...

    @property
    def fps(self) -> int: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def accepts_images(self) -> bool: ...

    @property
    def presets(self) -> Sequence[str]: ...

    @property
    def avatars(self) -> Sequence[str]: ...

    @property
    def default_avatar(self) -> str: ...


class QualityChange(Protocol):
    """The engine moved a session to another quality level, and why."""

    @property
    def level(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def reason(self) -> str: ...


class PhotoAvatar(Protocol):
    """A photograph prepared for the engine (its face found and framed)."""

    @property
    def image(self) -> np.ndarray: ...


class Portrait(Protocol):
    """A bundled real portrait the engine animates."""

    @property
    def name(self) -> str: ...


class EngineError(Exception):
    """Why the engine cannot serve a session: ``code`` is the API error code."""

    def __init__(self, code: str, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s  # when asking again may succeed (Retry-After)


class UnusableImage(ValueError):
    """A reference image the engine cannot read."""


class ImageTooLargeError(UnusableImage):
    """A reference image whose header declares more pixels than allowed; it was never decoded."""


@dataclass(frozen=True)
class ImageBounds:
    """The decoded size a reference image may have, read from its header before decoding."""

    max_side: int
    max_pixels: int
    min_side: int


class FrameSink(Protocol):
    """Where a session's generated frames go."""

    def on_generated(self, frames: list[PublishedFrame]) -> None:
        """As soon as frames arrive from the engine; must not block."""

    async def put(self, frames: list[PublishedFrame]) -> None:
        """May wait while the consumer is full (the engine's credit waits with it). Returns at
        once, dropping the frames, once the consumer is closed."""


class EngineInput(Protocol):
    """The audio-in pipeline's end: the engine's rates, and a timeline to feed and silence."""

    @property
    def info(self) -> EngineInfo: ...

    @property
    def first_chunk_samples(self) -> int: ...  # audio the first chunk needs before it can run

    @property
    def lookahead_samples(self) -> int: ...  # fed again this far back from the end, audio still makes its frames

    def feed(self, start: int, samples: np.ndarray) -> None: ...  # start < what was fed: those samples fed again

    def silence_from(self, sample: int) -> None: ...


class EngineOutput(Protocol):
    """The video-out pipeline's start: the engine's rates, its frames delivered to a sink, and where
    playout's clock is told."""

    @property
    def info(self) -> EngineInfo: ...

    @property
    def frame_size(self) -> tuple[int, int]: ...  # (height, width): a photo session's differ from info's

    def set_origin(self, origin: float | None) -> None: ...

    async def deliver(self, sink: FrameSink) -> None:
        """Frames to ``sink`` as they arrive, until the session closes; :class:`EngineError` if the
        engine loses the session."""

    async def quality_changes(self, on_change: Callable[[QualityChange], None]) -> None: ...

    def nbytes(self) -> int: ...  # bytes the engine holds between chunks for this session

    async def close(self) -> None: ...


class SessionEngine(EngineInput, EngineOutput, Protocol):
    """One session's engine, both ends."""

    @property
    def drawn(self) -> bool: ...  # a bundled avatar drawn by its renderer at the generated motion


class Engine(Protocol):
    """The engine as a session manager uses it."""

    @property
    def available(self) -> bool: ...

    @property
    def info(self) -> EngineInfo: ...  # EngineError while no worker has started

    @property
    def avatars(self) -> list[str]: ...

    @property
    def default_avatar(self) -> str: ...

    @property
    def portraits(self) -> Sequence[Portrait]: ...

    @property
    def local(self) -> LocalEngine: ...  # the engine's code the web process runs itself

    def portrait(self, name: str) -> PhotoAvatar | None: ...

    def photo_avatar(self, data: bytes, bounds: ImageBounds) -> PhotoAvatar:
        """A photograph made a photo avatar; :class:`ImageTooLargeError` over ``bounds``,
        :class:`UnusableImage` (with the reason) if unusable."""

    async def open(self, preset: str, avatar: str | None, photo: PhotoAvatar | None, seed: int,
                   name: str, drawn: bool = False) -> SessionEngine:
        """A session on the least loaded worker; :class:`EngineError` if none can take it."""
