"""The server's one link to the engine: every use of ``engine`` by the server goes through here.

:class:`Engine` is the loaded engine (its quality presets, the avatars it draws, warm-up,
reference-image decoding); :class:`EngineInfo` is what the rest of the server may know of it.
:class:`EngineLink` is one session's engine: opened off the event loop, fed audio in real
time, stepped by its own worker thread, which hands each chunk's frames to a
:class:`FrameSink` and waits while the sink is full (back-pressure travels back to the engine
instead of piling frames up). Replacing the in-process engine by one running elsewhere
changes this module only.

The engine package also holds two media helpers the server runs in its own process (the MP4
writer behind recordings and the Piper TTS wrapper); they are re-exported here so that no
other server module imports ``engine``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.avatars import DEFAULT_AVATAR, avatar_names
from engine.frames import PublishedFrame
from engine.media import piper
from engine.media.audio_io import MediaError, decode_image
from engine.media.mp4 import Mp4Writer
from engine.pipeline import Pipeline, warm_up

if TYPE_CHECKING:
    from server.config import Settings

__all__ = [
    "Engine",
    "EngineInfo",
    "EngineLink",
    "FrameSink",
    "ImageError",
    "Mp4Writer",
    "PublishedFrame",
    "load_engine",
    "load_pipeline",
    "piper",
]

log = logging.getLogger(__name__)


class EngineSession(Protocol):
    """One streaming engine session (learned or procedural)."""

    def feed(self, pcm: np.ndarray) -> None: ...
    def ready(self) -> bool: ...
    def step(self) -> list[PublishedFrame]: ...
    def nbytes(self) -> int: ...


class ImageError(ValueError):
    """A reference image the engine cannot read."""


@dataclass(frozen=True)
class EngineInfo:
    """What the server needs to know of the loaded engine (the same for every preset)."""

    config: str
    device: str
    fps: int
    sample_rate: int
    frame_size: tuple[int, int]  # (height, width)
    accepts_images: bool
    presets: tuple[str, ...]

    @property
    def samples_per_frame(self) -> int:
        return self.sample_rate // self.fps


def load_pipeline(settings: Settings) -> Pipeline:
    """The engine the settings name, loaded in this process (blocking: seconds)."""
    return Pipeline.from_config(settings.config, device=settings.device, threads=settings.engine_threads,
                                guidance=settings.guidance)


def load_engine(settings: Settings) -> Engine:
    return Engine(load_pipeline(settings))


def preset_pipelines(base: Pipeline) -> dict[str, Pipeline]:
    """Quality presets sharing one set of loaded weights, differing in schedule only: ``quality``
    keeps the I-chunk seam pass, ``fast`` turns it off (about one chunk less latency)."""
    interp = base.config.schedule.interp
    sibling = base.with_interp(not interp)
    with_interp, without = (base, sibling) if interp else (sibling, base)
    return {"quality": with_interp, "fast": without}


class Engine:
    """The loaded engine: its presets, the avatars it draws, warm-up and reference images."""

    def __init__(self, base: Pipeline) -> None:
        self._pipelines = preset_pipelines(base)
        self.avatars: list[str] = avatar_names()
        self.default_avatar: str = DEFAULT_AVATAR
        height, width = base.frame_size
        self.info = EngineInfo(
            config=base.config.name,
            device=base.device,
            fps=base.fps,
            sample_rate=base.sample_rate,
            frame_size=(height, width),
            accepts_images=base.accepts_images,
            presets=tuple(sorted(self._pipelines)),
        )

    @property
    def pipelines(self) -> Mapping[str, Pipeline]:
        """The in-process pipelines by preset (benchmarks and tests look inside them)."""
        return MappingProxyType(self._pipelines)

    def warm_up(self, preset: str) -> int:
        """Run one silent session through ``preset`` (blocking); returns the frames it made."""
        return warm_up(self._pipelines[preset])

    def decode_image(self, data: bytes) -> np.ndarray:
        """A PNG/JPEG/WebP reference image as RGB uint8 (H, W, 3); :class:`ImageError` if unreadable."""
        try:
            return decode_image(data)
        except MediaError as exc:
            raise ImageError(str(exc)) from None

    def open_session(self, preset: str, avatar: str | None, image: np.ndarray | None, seed: int) -> EngineSession:
        """A streaming engine session (blocking: encodes the reference)."""
        return self._pipelines[preset].open_session(avatar=avatar, image=image, seed=seed)


class FrameSink(Protocol):
    """Where a session's generated frames go."""

    def on_step(self, frames: list[PublishedFrame], step_s: float) -> None:
        """On the worker thread, as soon as a chunk is computed; must not block."""

    async def put(self, frames: list[PublishedFrame]) -> None:
        """On the event loop; may wait while the consumer is full (the worker waits with it).
        Returns at once, dropping the frames, once the consumer is closed."""


class EngineLink:
    """One session's engine: opened off the loop, fed audio, stepped by its own worker thread."""

    def __init__(self, engine: Engine, preset: str, name: str) -> None:
        self.info = engine.info
        self.preset = preset
        self._engine = engine
        self._name = name
        self._session: EngineSession | None = None
        self._worker: EngineWorker | None = None

    async def open(
        self,
        avatar: str | None,
        image: np.ndarray | None,
        seed: int,
        sink: FrameSink,
        prefill: Callable[[int], np.ndarray],
        prefill_limit: int,
    ) -> None:
        """Open the engine session, feed ``prefill(n)`` until its first chunk can run (at most
        ``prefill_limit`` samples), and start the worker: the first chunk is computed now."""
        session = await asyncio.to_thread(self._engine.open_session, self.preset, avatar, image, seed)
        self._session = session
        step, fed = self.info.samples_per_frame, 0
        while not session.ready() and fed < prefill_limit:
            session.feed(prefill(step))
            fed += step
        self._worker = EngineWorker(session, _Handoff(sink, asyncio.get_running_loop()), self._name)
        self._worker.start()

    def feed(self, samples: np.ndarray) -> None:
        """Audio for the engine's timeline, in order; the worker runs every chunk it completes."""
        if self._session is None or self._worker is None:
            raise RuntimeError("the engine session is not open")
        self._session.feed(samples)
        self._worker.wake()

    @property
    def error(self) -> BaseException | None:
        """Why the worker stopped, if it failed."""
        return None if self._worker is None else self._worker.error

    def nbytes(self) -> int:
        """Bytes the engine holds between chunks (0 when not open)."""
        return 0 if self._session is None else self._session.nbytes()

    async def close(self) -> None:
        """Stop the worker (waiting for a step in progress) and let the engine session go."""
        if self._worker is not None:
            await asyncio.to_thread(self._worker.stop)
        self._session = None


class _Handoff:
    """Frames from the worker thread to the sink on the event loop, the thread waiting until taken."""

    def __init__(self, sink: FrameSink, loop: asyncio.AbstractEventLoop) -> None:
        self._sink = sink
        self._loop = loop
        self.stopping = False

    def __call__(self, frames: list[PublishedFrame], step_s: float) -> None:
        self._sink.on_step(frames, step_s)
        future = asyncio.run_coroutine_threadsafe(self._sink.put(frames), self._loop)
        while not self.stopping:
            try:
                future.result(timeout=0.5)
                return
            except concurrent.futures.TimeoutError:
                continue
            except concurrent.futures.CancelledError:
                return
        future.cancel()


class EngineWorker:
    """The thread that runs the engine's blocking ``step()`` off the event loop.

    ``wake`` after each feed: it runs every chunk whose audio is in and hands the frames to
    the handoff, which blocks while the consumer is full.
    """

    def __init__(self, session: EngineSession, handoff: _Handoff, name: str, poll_s: float = 0.1) -> None:
        self._session = session
        self._handoff = handoff
        self._poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the loop to end and wait for it; False if a step was still running at the timeout."""
        self._handoff.stopping = True
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._session.ready():
                    self._wake.wait(self._poll_s)
                    self._wake.clear()
                    continue
                t0 = time.perf_counter()
                frames = self._session.step()
                if frames and not self._stop.is_set():
                    self._handoff(frames, time.perf_counter() - t0)
        except Exception as exc:
            if not self._stop.is_set():
                self.error = exc
                log.exception("engine worker %s failed", self._thread.name)
