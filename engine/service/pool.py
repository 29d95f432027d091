"""``WorkerPool``: the engine workers of this machine, started, watched and replaced.

Each worker is reached through a ``WorkerLink`` (its connection, its sessions, its latest
stats). A worker that dies (SIGKILL, out of memory, segfault) costs its own sessions an
``engine_lost`` error at once (the link watches the process sentinel and the connection),
and the pool starts a replacement (at once for a worker that served; with capped exponential
back-off, ``RESTART_BACKOFF_S``, for one that exits or fails before it serves); a worker that
reports due work but makes no progress for ``watchdog_s`` is killed and treated the same way.
Sessions go to the least loaded worker (the smallest share of its measured real-time capacity
in use; then the most room).

On a node with several web processes (``kind="node"``), the node starts the workers (a pool of
its own, with ``WorkerOptions.socket_dir`` set) and each web process's pool connects to them as
a guest: a lost worker is reconnected to (``RECONNECT_BACKOFF_S``) once the node has replaced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from engine.service.client import EngineClient, EngineError, EngineStream, QualityEvent, WorkerView
from engine.service.launch import WorkerHandle, launcher
from engine.service.messages import (
    CloseSession,
    EngineInfo,
    FramesReady,
    OpenSession,
    QualityLevelChanged,
    SessionFailed,
    SessionOpened,
    SessionSpec,
    Shutdown,
    WorkerFailed,
    WorkerReady,
    WorkerStats,
)
from engine.service.worker import WorkerOptions

log = logging.getLogger(__name__)
OPEN_TIMEOUT_S = 30.0
# A worker that ends before it serves (it exits or fails while loading) is started again after a
# delay that doubles with each such start, up to the cap; one that served is replaced at once.
RESTART_BACKOFF_S = (0.5, 30.0)
# A node's web process reconnects to a shared worker the node is restarting: it tries again soon.
RECONNECT_BACKOFF_S = (0.5, 2.0)
# How long past its settle window a worker's next report may take (it reports every 0.5 s).
MEASURE_REPORT_S = 1.0


class WorkerLink:
    """The web side of one worker."""

    def __init__(self, index: int, options: WorkerOptions, make: Callable[[WorkerOptions], WorkerHandle],
                 on_ended: Callable[[WorkerLink], None]) -> None:
        self.index = index
        self.options = options
        self._make = make
        self._on_ended = on_ended
        self.handle: WorkerHandle | None = None
        self._send: Callable[[object], None] | None = None
        self.state = "starting"
        self.served = False  # it reported ready once
        self.info: EngineInfo | None = None
        self.stats: WorkerStats | None = None
        self.error: str | None = None
        self.pid: int | None = None
        self.streams: dict[str, EngineStream] = {}
        self.ready = asyncio.Event()
        self.last_heard = time.monotonic()
        self.progress_at = time.monotonic()  # when the batch count last moved (or nothing was due)
        self._opening: dict[str, asyncio.Future[SessionOpened]] = {}
        self.opened_at = -math.inf  # when the newest session opened (see WorkerOptions.settle_s)
        self.reported_at = -math.inf  # when the latest WorkerStats came
        self._report = asyncio.Event()  # set at each WorkerStats, then replaced: one wait per report

    def start(self) -> None:
        self.handle = handle = self._make(self.options)
        self.pid = handle.pid
        self._send = handle.connect(self._dispatch, self.ended, name=f"worker-outbox-{self.index}")

    @property
    def alive(self) -> bool:
        return self.state == "ready"

    @property
    def free(self) -> int:
        """Capacity left: the sessions the worker last said it can hold in real time, less those
        open or opening on it now (its report may predate the latest opens and closes)."""
        if self.stats is None or not self.measured:
            return 0
        return self.stats.capacity + self.stats.client_sessions - len(self.streams) - len(self._opening)

    @property
    def settling(self) -> float:
        """Seconds until the newest session's live cost has been measured (0: settled)."""
        if not self.streams and not self._opening:
            return 0.0
        return max(0.0, self.opened_at + self.options.settle - time.monotonic())

    @property
    def measured(self) -> bool:
        """Settled, and (where there is a settle window) reported on since: the capacity the
        worker last reported counts its newest session's live cost."""
        settle = self.options.settle
        if settle <= 0:
            return True
        if self._opening:  # its open is on the way: a new settle window starts with it
            return False
        return self.settling <= 0 and (not self.streams or self.reported_at >= self.opened_at + settle)

    async def measure(self) -> None:
        """Until :attr:`measured` (the settle window, then the worker's next report)."""
        while not self.measured and self.alive:
            if self.settling > 0:
                await asyncio.sleep(self.settling)
            else:
                await self._report.wait()

    @property
    def load(self) -> float:
        """Share of its real-time capacity in use (1.0 when it has no room or has not measured it)."""
        total = len(self.streams) + len(self._opening) + self.free
        return 1.0 if total <= 0 else 1.0 - self.free / total

    # ---- connection ----------------------------------------------------------------------

    def send(self, msg: object) -> None:
        """Handed to the worker's connection at once: the event loop never waits on a worker."""
        if self.state in ("lost", "failed", "stopped") or self._send is None:
            return
        self._send(msg)

    def _dispatch(self, msg: object) -> None:
        if self.state in ("lost", "failed", "stopped"):  # an in-process worker's last words, put on the loop late
            return
        self.last_heard = time.monotonic()
        match msg:
            case FramesReady(session, frames):
                stream = self.streams.get(session)
                if stream is not None:  # else closed meanwhile: its slot file is gone
                    stream.frames_ready(frames)
            case WorkerStats():
                if self.stats is None or msg.batches != self.stats.batches or not msg.due:
                    self.progress_at = self.last_heard
                self.stats, self.reported_at = msg, self.last_heard
                self._report.set()
                self._report = asyncio.Event()
                for sid, nbytes in msg.state_bytes.items():
                    if sid in self.streams:
                        self.streams[sid].state_bytes = nbytes
            case QualityLevelChanged(session, level, name, reason):
                if session in self.streams:
                    self.streams[session].quality_changed(QualityEvent(level, name, reason))
            case SessionOpened(session):
                # Stays in ``_opening`` until :meth:`open` resumes and records its stream: popped
                # here, the session would count nowhere in between and a parallel open could take its slot.
                future = self._opening.get(session)
                if future is not None and not future.done():
                    future.set_result(msg)
            case SessionFailed(session, message):
                stream = self.streams.pop(session, None)
                if stream is not None:
                    stream.fail(EngineError("engine_failed", f"the engine failed on this session: {message}"))
            case WorkerReady(pid, _, info, calibration):
                self.pid, self.info, self.state, self.served = pid, info, "ready", True
                # what its calibration measured: a replacement started from these options starts from it
                self.options = dataclasses.replace(self.options, calibration=calibration or None)
                self.ready.set()
            case WorkerFailed(message):
                self.error = message
                log.error("engine worker %d could not start: %s", self.index, message)
                self.ended(message, state="failed")

    def ended(self, reason: str, state: str = "lost") -> None:
        """The worker is gone (or never came up): fail its sessions, free its resources."""
        if self.state in ("lost", "failed", "stopped"):
            return
        was_ready = self.state == "ready"
        self.state = state if self.state != "stopping" else "stopped"
        if self.handle is not None:
            self.handle.disconnect()
        self.error = self.error or reason
        error = EngineError("engine_lost", "the engine worker serving this session stopped")
        for stream in list(self.streams.values()):
            stream.fail(error)
        self.streams.clear()
        for future in self._opening.values():
            if not future.done():
                future.set_exception(EngineError("engine_unavailable", "the engine worker stopped"))
        self._opening.clear()
        self.ready.set()
        if was_ready and self.state == "lost":
            log.error("engine worker %d (pid %s) lost: %s", self.index, self.pid, reason)
        self._on_ended(self)

    # ---- sessions ------------------------------------------------------------------------

    async def open(self, spec: SessionSpec, session: str | None = None) -> EngineStream:
        info = self.info
        sid = session or "e_" + secrets.token_hex(6)
        if sid in self.streams or sid in self._opening:
            raise EngineError("bad_request", f"session {sid} is already open")
        address, slots = self.handle.frame_slots(2 * info.step_frames, spec.frame_size(info), info.samples_per_frame)
        future: asyncio.Future[SessionOpened] = asyncio.get_running_loop().create_future()
        self._opening[sid] = future
        self.send(OpenSession(sid, spec, address, slots.count))
        try:
            opened = await asyncio.wait_for(future, OPEN_TIMEOUT_S)
        except BaseException as exc:
            slots.unlink()
            self.send(CloseSession(sid))
            if isinstance(exc, asyncio.TimeoutError):
                raise EngineError("engine_unavailable", "the engine did not open the session in time") from None
            raise
        finally:
            self._opening.pop(sid, None)
        if opened.error is not None:
            slots.unlink()
            raise EngineError(opened.code, opened.error, opened.retry_after_s)
        self.opened_at = time.monotonic()  # no await from here until the stream is recorded
        stream = EngineStream(sid, info, slots, self.send, self._stream_closed)
        stream.quality_level, stream.quality_name = opened.quality_level, opened.quality_name
        stream.frames_per_chunk = opened.frames_per_chunk or info.frames_per_chunk
        stream.first_chunk_samples = opened.first_chunk_samples or info.first_chunk_samples
        stream.lookahead_samples = opened.lookahead_samples
        self.streams[sid] = stream
        return stream

    def _stream_closed(self, stream: EngineStream) -> None:
        if self.streams.pop(stream.id, None) is not None:
            self.send(CloseSession(stream.id))

    def kill(self) -> None:
        if self.handle is not None:
            self.handle.kill()

    async def stop(self, timeout_s: float = 5.0) -> None:
        if self.state in ("lost", "failed", "stopped"):
            return
        self.send(Shutdown())
        self.state = "stopping"
        handle = self.handle
        await asyncio.to_thread(handle.join, timeout_s)
        if handle.alive():
            handle.kill()
        self.ended("stopped")

    def view(self) -> WorkerView:
        s = self.stats
        # This process's sessions now, and the node's other web processes' as of the last report.
        sessions = len(self.streams) + (s.sessions - s.client_sessions if s is not None else 0)
        return WorkerView(self.index, self.pid, self.options.device, self.alive, self.state,
                          sessions, max(0, self.free) if self.alive else 0, s, self.error,
                          tuple(self.streams), round(self.settling, 3))


def cuda_devices() -> list[str]:
    """CUDA devices of this machine, found without importing torch in the web process."""
    gpus = Path("/proc/driver/nvidia/gpus")
    count = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    return [f"cuda:{i}" for i in range(count)]


def worker_devices(options: WorkerOptions, found: list[str] | None = None) -> list[str]:
    """The first device of each worker: every CUDA device (``device="cuda"``), or for an engine
    over several ranks every group of ``world_size`` consecutive ones (a 2-rank plan on 8 GPUs:
    ``cuda:0``, ``cuda:2``, ... each worker's ranks on the next ones); a CPU or a named device:
    that one (ranks on a CPU share it)."""
    world = options.parallel.world_size if options.parallel is not None else 1
    if options.device != "cuda":
        return [options.device]
    found = cuda_devices() if found is None else found
    if world == 1:
        return found or ["cuda"]
    if len(found) < world:
        raise ValueError(f"an engine over {world} ranks needs {world} CUDA devices; this machine has {len(found)}")
    return found[: len(found) // world * world : world]


class WorkerPool(EngineClient):
    def __init__(self, options: WorkerOptions, workers: int | None = None, kind: str = "subprocess",
                 watchdog_s: float = 5.0, start_timeout_s: float = 180.0, restart: bool = True,
                 load: Callable | None = None, backoff_s: tuple[float, float] | None = None) -> None:
        devices = worker_devices(options)
        count = workers or len(devices)
        if kind == "inprocess" and count != 1:
            raise ValueError("an in-process engine has exactly one worker")
        self.options = [dataclasses.replace(options.on_device(devices[i % len(devices)]), index=i)
                        for i in range(count)]
        self.kind = kind
        self._make = launcher(kind, load)
        self.watchdog_s = watchdog_s
        self.start_timeout_s = start_timeout_s
        self.restart = restart
        self.backoff_s = backoff_s or (RECONNECT_BACKOFF_S if kind == "node" else RESTART_BACKOFF_S)
        self._failures = [0] * count  # per worker: consecutive starts that ended before it served
        self._next_attempt: list[float | None] = [None] * count  # monotonic time of the scheduled start
        self.links: list[WorkerLink] = []
        self.info: EngineInfo | None = None
        self.restarts = 0
        self.replaced: asyncio.Queue[WorkerLink] = asyncio.Queue()  # replacement workers, once they serve
        self.lost = 0
        self._closing = False
        self._watch: asyncio.Task | None = None
        self._restarting: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.links = [self._launch(i) for i in range(len(self.options))]
        await self.wait_ready(self.start_timeout_s)
        self._watch = asyncio.create_task(self._watchdog(), name="engine-watchdog")

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until every worker is up or has failed; True if at least one is up."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(link.ready.wait() for link in self.links)), timeout_s)
        return any(link.alive for link in self.links)

    def _launch(self, index: int, options: WorkerOptions | None = None) -> WorkerLink:
        link = WorkerLink(index, options or self.options[index], self._make, self._ended)
        link.start()
        task = asyncio.create_task(self._adopt_info(link))
        self._restarting.add(task)
        task.add_done_callback(self._restarting.discard)
        return link

    async def _adopt_info(self, link: WorkerLink) -> None:
        await link.ready.wait()
        if link.info is not None and self.info is None:
            self.info = link.info

    def _ended(self, link: WorkerLink) -> None:
        if link.state == "lost":
            self.lost += 1
        if self._closing or not self.restart or link.state not in ("lost", "failed"):
            return
        i = link.index
        delay = 0.0
        if link.served:
            self._failures[i] = 0
        else:
            self._failures[i] += 1
            base, cap = self.backoff_s
            delay = min(cap, base * 2 ** (self._failures[i] - 1))
            log.warning("engine worker %d ended before serving (%s; %d in a row): next start in %.1f s",
                        i, link.error, self._failures[i], delay)
        self._next_attempt[i] = time.monotonic() + delay
        task = asyncio.get_running_loop().create_task(self._replace(link))
        self._restarting.add(task)
        task.add_done_callback(self._restarting.discard)

    async def _replace(self, old: WorkerLink) -> None:
        await asyncio.to_thread(old.handle.join, 2.0)
        await asyncio.sleep(max(0.0, (self._next_attempt[old.index] or 0.0) - time.monotonic()))
        self._next_attempt[old.index] = None
        if self._closing:
            return
        self.restarts += 1
        log.info("starting a replacement for engine worker %d%s", old.index,
                 " from its measured costs" if old.options.calibration else "")
        self.links[old.index] = link = self._launch(old.index, old.options)
        await link.ready.wait()
        if link.alive:
            self._failures[old.index] = 0
            self.replaced.put_nowait(link)

    async def _watchdog(self, interval_s: float = 0.25) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for link in list(self.links):
                if not link.alive:
                    continue
                link.handle.receive()  # what the worker said while this loop was busy counts first
                if not link.alive:
                    continue
                now = time.monotonic()
                silent = now - link.last_heard > self.watchdog_s
                stuck = link.stats is not None and link.stats.due and now - link.progress_at > self.watchdog_s
                if silent or stuck:
                    log.error("engine worker %d (pid %s) made no progress for %.0f s: killing it",
                              link.index, link.pid, self.watchdog_s)
                    link.error = "no progress"
                    link.kill()
                    if link.handle.sentinel is None:  # a thread cannot die by signal
                        link.ended("no progress")

    async def open(self, spec: SessionSpec, session: str | None = None) -> EngineStream:
        """On the least loaded worker with room. Where the only thing in the way is a worker still
        measuring its newest session (``WorkerOptions.settle_s``, then its next report), the open
        waits for that measure, up to one settle window and a report, and is then admitted or
        refused: the client gets one answer instead of a refusal to retry."""
        deadline = None
        while True:
            ready = [link for link in self.links if link.alive]
            if not ready:
                raise EngineError("engine_unavailable", "no engine worker is running; see the server log")
            best = min(ready, key=lambda link: (link.load, -link.free))
            if best.free > 0:
                return await best.open(spec, session)
            measuring = [link for link in ready if not link.measured]
            if not measuring:
                raise EngineError("at_capacity", "every engine worker is at its real-time capacity; try again later")
            now = time.monotonic()
            if deadline is None:
                deadline = now + max(link.options.settle for link in measuring) + MEASURE_REPORT_S
            if now >= deadline:
                wait = max(1, math.ceil(min(link.settling for link in measuring)))
                raise EngineError("at_capacity", "every engine worker is at its real-time capacity or measuring "
                                  f"its newest session; try again in {wait} s", retry_after_s=wait)
            waits = [asyncio.ensure_future(link.measure()) for link in measuring]
            try:
                await asyncio.wait(waits, timeout=deadline - now, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()

    def workers(self) -> list[WorkerView]:
        now = time.monotonic()
        return [dataclasses.replace(link.view(), start_failures=self._failures[link.index],
                                    next_attempt_s=None if self._next_attempt[link.index] is None
                                    else round(max(0.0, self._next_attempt[link.index] - now), 3))
                for link in self.links]

    @property
    def degraded(self) -> bool:
        return not any(link.alive for link in self.links)

    async def close(self) -> None:
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await asyncio.gather(*(link.stop() for link in self.links), return_exceptions=True)
        for task in list(self._restarting):
            task.cancel()
        for link in self.links:  # streams nobody closed: their slot files go with the pool
            for stream in list(link.streams.values()):
                await stream.close()
