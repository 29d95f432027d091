"""The server's one link to the engine: every use of the engine's machinery by the server goes
through here (the settings and the CLI also read the preset names, ``engine.presets``, a plain enum).

The engine runs in its own worker processes (``engine.service``), reached through one
``EngineClient``; :class:`Engine` is the server's view of it (what it draws, opening
sessions, worker figures, reference-image decoding) and :class:`EngineLink` one session's
engine: audio pushed by sample index, frames taken in order from shared memory (the engine
runs ahead of playout by its frame credit at most), interrupts and playout deadlines passed
on, quality changes and failures reported.

The engine package also holds two media helpers the server runs in its own process (the MP4
writer behind recordings and the Piper TTS wrapper); they are re-exported here so that no
other server module imports them from ``engine``; so are personal avatars' enrolment and
store (``engine.personal``), which the web process runs beside its sessions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

from engine.config import get_config
from engine.frames import PublishedFrame
from engine.media import piper
from engine.media.audio_io import MediaError
from engine.media.image import ImageLimits, ImageTooLarge, decode_image, encode_jpeg
from engine.media.mp4 import Mp4Writer
from engine.parallel.plan import ParallelPlan
from engine.personal.enroll import MAX_BYTES as MAX_VIDEO_BYTES
from engine.personal.enroll import EnrollError, EnrollTimeout, enroll
from engine.personal.store import AvatarStore, StoreError
from engine.photo.avatar import FaceError, PhotoAvatar, photo_avatar
from engine.portraits import PORTRAITS, Portrait, portrait_avatar
from engine.service.client import EngineClient, EngineError, EngineStream, QualityEvent, WorkerView
from engine.service.messages import EngineInfo, SessionSpec
from engine.service.pool import WorkerPool, worker_devices
from engine.service.worker import WorkerOptions

__all__ = [
    "MAX_VIDEO_BYTES",
    "AvatarStore",
    "EnrollError",
    "EnrollTimeout",
    "StoreError",
    "enroll",
    "encode_jpeg",
    "Engine",
    "EngineClient",
    "EngineError",
    "EngineInfo",
    "EngineLink",
    "FrameSink",
    "UnusableImage",
    "ImageLimits",
    "ImageTooLargeError",
    "Mp4Writer",
    "ParallelPlan",
    "PhotoAvatar",
    "PublishedFrame",
    "QualityEvent",
    "WorkerOptions",
    "WorkerPool",
    "WorkerView",
    "piper",
    "sample_rate_of",
    "worker_devices",
]

log = logging.getLogger(__name__)
ORIGIN_TOLERANCE_S = 0.004  # playout deadline moves smaller than this are not worth a message


class UnusableImage(ValueError):
    """A reference image the engine cannot read."""


class ImageTooLargeError(UnusableImage):
    """A reference image whose header declares more pixels than allowed; it was never decoded."""


def sample_rate_of(config: str) -> int:
    """The audio rate an engine config runs at, known before any worker starts (KeyError if unknown)."""
    return get_config(config).audio.sample_rate


class Engine:
    """The engine as the server uses it, started and stopped with the app."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()

    @property
    def available(self) -> bool:
        return self.client.info is not None and any(v.alive for v in self.client.workers())

    @property
    def info(self) -> EngineInfo:
        if self.client.info is None:
            raise EngineError("engine_unavailable", "no engine worker has started; see the server log")
        return self.client.info

    @property
    def avatars(self) -> list[str]:
        return list(self.info.avatars)

    @property
    def default_avatar(self) -> str:
        return self.info.default_avatar

    @property
    def portraits(self) -> list[Portrait]:
        """The bundled real portraits, offered where the engine animates photos."""
        return list(PORTRAITS) if self.info.accepts_images else []

    def portrait(self, name: str) -> PhotoAvatar | None:
        """The photo avatar of the bundled portrait ``name``, or None if there is none by that name."""
        return portrait_avatar(name) if name in {p.name for p in self.portraits} else None

    def workers(self) -> list[WorkerView]:
        return self.client.workers()

    def capacity(self) -> int:
        return self.client.capacity()

    def photo_avatar(self, data: bytes, limits: ImageLimits) -> PhotoAvatar:
        """A PNG/JPEG/WebP/GIF photograph made a photo avatar (its face found and cropped), its
        size checked from the header first; :class:`ImageTooLargeError` over ``limits``,
        :class:`UnusableImage` (with the reason: no face found, too small, turned too far) if unusable."""
        try:
            return photo_avatar(decode_image(data, limits))
        except ImageTooLarge as exc:
            raise ImageTooLargeError(str(exc)) from None
        except (MediaError, FaceError) as exc:
            raise UnusableImage(str(exc)) from None

    async def open(self, preset: str, avatar: str | None, photo: PhotoAvatar | None, seed: int,
                   name: str, drawn: bool = False) -> EngineLink:
        """A session on the least loaded worker; :class:`EngineError` if none can take it."""
        spec = SessionSpec(avatar=avatar, photo=photo, seed=seed, preset=preset, drawn=drawn)
        stream = await self.client.open(spec, name)
        return EngineLink(stream, preset, name, drawn=drawn and photo is None and self.info.accepts_images)


class FrameSink(Protocol):
    """Where a session's generated frames go."""

    def on_generated(self, frames: list[PublishedFrame]) -> None:
        """As soon as frames arrive from the engine; must not block."""

    async def put(self, frames: list[PublishedFrame]) -> None:
        """May wait while the consumer is full (the engine's credit waits with it). Returns at
        once, dropping the frames, once the consumer is closed."""


class EngineLink:
    """One session's engine."""

    def __init__(self, stream: EngineStream, preset: str, name: str, drawn: bool = False) -> None:
        self.stream = stream
        self.drawn = drawn  # a bundled avatar drawn by its renderer at the generated motion
        self.info = stream.info
        self.frame_size = stream.slots.height, stream.slots.width  # a photo session's differ from info's
        self.preset = preset
        self.name = name
        self._origin: float | None = None

    def feed(self, start: int, samples: np.ndarray) -> None:
        """Audio for the engine's timeline from sample ``start`` on, in order (the feed clock
        counts the samples fed)."""
        if samples.size:
            self.stream.push_audio(start, samples)

    def silence_from(self, sample: int) -> None:
        """An interrupt: audio the engine holds from ``sample`` on becomes silence."""
        self.stream.silence_from(sample)

    def set_origin(self, origin: float | None) -> None:
        """Frame n plays at ``origin + n / fps``: the engine schedules its chunks by it."""
        if origin is None or (self._origin is not None and abs(origin - self._origin) < ORIGIN_TOLERANCE_S):
            return
        self._origin = origin
        self.stream.set_origin(origin)

    async def deliver(self, sink: FrameSink) -> None:
        """Frames to ``sink`` as they arrive, until the session closes; raises :class:`EngineError`
        if the engine loses the session."""
        stream = self.stream
        while True:
            frames = [await stream.next_frame()]
            while stream.pending() and len(frames) < stream.frames_per_chunk:
                frames.append(await stream.next_frame())
            sink.on_generated(frames)
            await sink.put(frames)

    async def quality_changes(self, on_change: Callable[[QualityEvent], None]) -> None:
        while True:
            on_change(await self.stream.quality_events.get())

    @property
    def error(self) -> EngineError | None:
        return self.stream.error

    def nbytes(self) -> int:
        """Bytes the engine holds between chunks for this session (as last reported)."""
        return self.stream.state_bytes

    @property
    def quality_level(self) -> int:
        return self.stream.quality_level

    async def close(self) -> None:
        await self.stream.close()

