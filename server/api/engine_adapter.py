"""The one adapter over the engine: the server's ports (``server.base.engine_port``) made of the
engine's client, started and stopped with the app and handed to the session manager.

:class:`Engine` is the server's view of the ``EngineClient`` (what it draws, opening sessions,
worker figures, reference-image preparation) and :class:`EngineLink` one session's engine: audio
pushed by sample index, frames taken in order from shared memory (the engine runs ahead of
playout by its frame credit at most) and delivered to the session's sink, interrupts and playout
deadlines passed on, quality changes and failures reported. The engine's errors become the
server's :class:`~server.base.engine_port.EngineError` here, so nothing below catches the engine's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import numpy as np

from engine.avatars import avatar_image
from engine.config import get_config
from engine.frames import PublishedFrame
from engine.media.audio_io import MediaError
from engine.media.image import ImageLimits, ImageTooLarge, decode_image, encode_jpeg
from engine.photo.avatar import FaceError, PhotoAvatar, photo_avatar
from engine.portraits import PORTRAITS, Portrait, portrait_avatar
from engine.service import client as engine_client
from engine.service.client import EngineClient, EngineStream, QualityEvent, WorkerView
from engine.service.messages import EngineInfo, SessionSpec
from server.api.local_adapter import local_engine
from server.base.engine_port import EngineError, FrameSink, ImageBounds, ImageTooLargeError, UnusableImage
from server.base.local_engine import LocalEngine

__all__ = ["Engine", "EngineLink", "encode_jpeg", "sample_rate_of", "server_errors"]

log = logging.getLogger(__name__)
ORIGIN_TOLERANCE_S = 0.004  # playout deadline moves smaller than this are not worth a message


@contextlib.contextmanager
def server_errors() -> Iterator[None]:
    """The engine's errors raised as the server's."""
    try:
        yield
    except engine_client.EngineError as exc:
        raise EngineError(exc.code, exc.message, exc.retry_after_s) from exc


def sample_rate_of(config: str) -> int:
    """The audio rate an engine config runs at, known before any worker starts (KeyError if unknown)."""
    return get_config(config).audio.sample_rate


class Engine:
    """The engine as the server uses it, started and stopped with the app."""

    def __init__(self, client: EngineClient, local: LocalEngine | None = None) -> None:
        self.client = client
        self.local = local or local_engine()

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

    def avatar_picture(self, name: str, side: int = 128) -> bytes | None:
        """A bundled drawn avatar's neutral face as a JPEG of ``side`` pixels, or None if there is none
        by that name."""
        if name not in self.avatars:
            return None
        return encode_jpeg(avatar_image(name, (side, side)))

    def portrait(self, name: str) -> PhotoAvatar | None:
        """The photo avatar of the bundled portrait ``name``, or None if there is none by that name."""
        return portrait_avatar(name) if name in {p.name for p in self.portraits} else None

    def workers(self) -> list[WorkerView]:
        return self.client.workers()

    def capacity(self) -> int:
        return self.client.capacity()

    def photo_avatar(self, data: bytes, bounds: ImageBounds) -> PhotoAvatar:
        """A PNG/JPEG/WebP/GIF photograph made a photo avatar (its face found and cropped), its
        size checked from the header first; :class:`ImageTooLargeError` over ``bounds``,
        :class:`UnusableImage` (with the reason: no face found, too small, turned too far) if unusable."""
        limits = ImageLimits(bounds.max_side, bounds.max_pixels, bounds.min_side)
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
        with server_errors():
            stream = await self.client.open(spec, name)
        return EngineLink(stream, preset, name, drawn=drawn and photo is None and self.info.accepts_images)


class EngineLink:
    """One session's engine (``server.base.engine_port.SessionEngine``)."""

    def __init__(self, stream: EngineStream, preset: str, name: str, drawn: bool = False) -> None:
        self.stream = stream
        self.drawn = drawn  # a bundled avatar drawn by its renderer at the generated motion
        self.info = stream.info
        self.frame_size = stream.slots.height, stream.slots.width  # a photo session's differ from info's
        self.preset = preset
        self.name = name
        self._origin: float | None = None

    @property
    def first_chunk_samples(self) -> int:
        return self.stream.first_chunk_samples

    @property
    def lookahead_samples(self) -> int:
        """How far back from the end of what was fed audio may be fed again and still make the
        frames it belongs to (the frames wait that long past their end before they are made)."""
        return self.stream.lookahead_samples

    def feed(self, start: int, samples: np.ndarray) -> None:
        """Audio for the engine's timeline from sample ``start`` on (the feed clock counts the
        samples fed); from before the end of what was fed, it replaces what was fed there."""
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
        with server_errors():
            while True:
                frames: list[PublishedFrame] = [await stream.next_frame()]
                while stream.pending() and len(frames) < stream.frames_per_chunk:
                    frames.append(await stream.next_frame())
                sink.on_generated(frames)
                await sink.put(frames)

    async def quality_changes(self, on_change: Callable[[QualityEvent], None]) -> None:
        while True:
            on_change(await self.stream.quality_events.get())

    def nbytes(self) -> int:
        """Bytes the engine holds between chunks for this session (as last reported)."""
        return self.stream.state_bytes

    async def close(self) -> None:
        await self.stream.close()
