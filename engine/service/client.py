"""``EngineClient``: the one interface the web process has to the engine.

Open a session (avatar or image, seed, preset), push its audio by sample index, take its
published frames in order, silence queued audio on an interrupt, close it, read stats. The
implementations differ only in where the worker loop runs: ``WorkerPool`` over subprocess
workers (the default: one per device, crash-isolated, supervised) or over one in-process
worker thread (``--engine inprocess``, for tests and debugging), whose messages are handed
over as they are and whose frames are written into this process's memory: no pipe, no
pickling, no shared memory (``engine.service.launch``).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.frames import PublishedFrame
from engine.service.messages import (
    EngineInfo,
    FrameRef,
    PushAudio,
    ReleaseSlots,
    SessionSpec,
    SetOrigin,
    SilenceFrom,
    WorkerStats,
)
from engine.service.slots import FrameSlots


class EngineError(Exception):
    """Why a session cannot be served: ``code`` is the API error code."""

    def __init__(self, code: str, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s  # when asking again may succeed (Retry-After)


@dataclass(frozen=True)
class QualityEvent:
    level: int
    name: str
    reason: str


@dataclass(frozen=True)
class WorkerView:
    """One worker as ``GET /v1/engine`` shows it."""

    index: int
    pid: int | None
    device: str
    alive: bool
    state: str  # starting | ready | failed | lost
    sessions: int
    capacity: int
    stats: WorkerStats | None
    error: str | None = None
    session_ids: tuple[str, ...] = ()
    settling_s: float = 0.0  # admits nothing until its newest session's live cost is measured
    start_failures: int = 0  # consecutive starts that ended before the worker served
    next_attempt_s: float | None = None  # seconds until the next start, while one is scheduled


class EngineStream:
    """One engine session as the web process sees it.

    Frames arrive as slot references; ``next_frame`` copies a frame out of its slot and
    gives the slot back, so the engine can run ahead of playout by the slot count at most.
    """

    def __init__(self, session: str, info: EngineInfo, slots: FrameSlots, send: Callable[[object], None],
                 on_close: Callable[[EngineStream], None]) -> None:
        self.id = session
        self.info = info
        self.slots = slots
        self._send = send
        self._on_close = on_close
        self._refs: asyncio.Queue[FrameRef | None] = asyncio.Queue()
        self.quality_events: asyncio.Queue[QualityEvent] = asyncio.Queue(64)
        self.quality_level = 0
        self.quality_name = ""
        self.frames_per_chunk = info.frames_per_chunk  # of this session's preset
        self.first_chunk_samples = info.first_chunk_samples
        self.lookahead_samples = 0  # pushed again this far back from the end, audio still reaches its frames
        self.error: EngineError | None = None
        self.lost = asyncio.Event()
        self.closed = False
        self._release: list[int] = []
        self._release_scheduled = False
        self.state_bytes = 0

    # ---- audio in ----------------------------------------------------------------------

    def push_audio(self, start: int, samples: np.ndarray) -> None:
        if not self.closed and self.error is None:
            self._send(PushAudio(self.id, start, np.array(samples, dtype=np.float32)))  # the engine's own copy

    def silence_from(self, sample: int) -> None:
        if not self.closed and self.error is None:
            self._send(SilenceFrom(self.id, sample))

    def set_origin(self, origin: float) -> None:
        """Frame n will be played at ``origin + n / fps`` (``time.monotonic()`` seconds)."""
        if not self.closed and self.error is None:
            self._send(SetOrigin(self.id, origin))

    # ---- frames out --------------------------------------------------------------------

    async def next_frame(self) -> PublishedFrame:
        """The next published frame, in order; raises EngineError once the engine is gone."""
        ref = await self._refs.get()
        if ref is None:
            raise self.error or EngineError("closed", "the session is closed")
        rgb, audio = self.slots.read(ref.slot)
        self._give_back(ref.slot)
        info = self.info
        return PublishedFrame(ref.index, info.fps, rgb, audio, info.sample_rate, ref.chunk)

    def pending(self) -> int:
        return self._refs.qsize()

    def _give_back(self, slot: int) -> None:
        self._release.append(slot)
        if not self._release_scheduled:
            self._release_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_release)

    def _flush_release(self) -> None:
        self._release_scheduled = False
        if self._release and not self.closed and self.error is None:
            self._send(ReleaseSlots(self.id, tuple(self._release)))
        self._release.clear()

    # ---- from the worker link ----------------------------------------------------------

    def frames_ready(self, refs: tuple[FrameRef, ...]) -> None:
        """Frames the worker published, in order."""
        for ref in refs:
            self._refs.put_nowait(ref)

    def quality_changed(self, event: QualityEvent) -> None:
        self.quality_level, self.quality_name = event.level, event.name
        if self.quality_events.full():
            self.quality_events.get_nowait()
        self.quality_events.put_nowait(event)

    def fail(self, error: EngineError) -> None:
        """The engine is gone: no frame will come, so the slot file goes now, read or not."""
        if self.error is None:
            self.error = error
            self._refs.put_nowait(None)
            self.lost.set()
            self.slots.unlink()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._on_close(self)
        self._refs.put_nowait(None)
        self.slots.unlink()


class EngineClient(abc.ABC):
    """The engine as the web process uses it (see the module docstring)."""

    info: EngineInfo | None

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def open(self, spec: SessionSpec, session: str | None = None) -> EngineStream:
        """A new engine session (named ``session``, or a fresh id); EngineError ``at_capacity`` /
        ``engine_unavailable`` / ``bad_request``."""

    @abc.abstractmethod
    def workers(self) -> list[WorkerView]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @property
    def healthy(self) -> bool:
        views = self.workers()
        return bool(views) and all(v.alive for v in views)

    def capacity(self) -> int:
        return sum(v.capacity for v in self.workers() if v.alive)
