"""The engine worker loop: one per device, serving every session placed on it.

``serve(conn, options)`` is the whole worker: it loads the pipeline once, measures what a
chunk costs, reports ready, then loops — apply the web process's commands, run the most
urgent batch, write its frames into the sessions' slots (shared memory, or this process's
memory for a worker thread), report. The same
loop runs in a subprocess (the default: a crash costs only this worker's sessions) or on a
thread of the web process (``--engine inprocess``).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from engine.batch import Render
from engine.heap import freeze_heap
from engine.parallel.plan import ParallelPlan
from engine.presets import DEFAULT_PRESET, Preset
from engine.service.messages import (
    CloseSession,
    EngineInfo,
    FrameRef,
    FramesReady,
    OpenSession,
    PushAudio,
    QualityLevelChanged,
    ReleaseSlots,
    SessionFailed,
    SessionOpened,
    SessionSpec,
    SetOrigin,
    Shutdown,
    SilenceFrom,
    WorkerFailed,
    WorkerReady,
    WorkerStats,
)
from engine.service.slots import FrameSlots
from engine.service.worker_clients import OWNER, ClientGone, ClientJoined, Clients

log = logging.getLogger(__name__)
STATS_INTERVAL_S = 0.5
# (address, slot count, (height, width), audio samples per frame) -> the worker's handle on the slots
AttachSlots = Callable[[str, int, tuple[int, int], int], FrameSlots]
IDLE_WAIT_S = 0.02


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker builds its engine; picklable, so a subprocess can be given it."""

    config: str = "tiny"
    device: str = "cpu"
    threads: int | None = None
    guidance: float | None = None
    weights: str | None = None
    warm_up: bool = True
    calibrate: tuple[int, ...] = (1, 2)  # batch sizes measured before the worker reports ready
    max_batch: int = 16
    default_preset: str = DEFAULT_PRESET  # what the capacity figure counts sessions of
    drawn: bool = False  # sessions that do not say are drawn: the capacity figure counts them so
    # Share of each chunk period kept free when counting capacity; None: 0.35 on a CPU whose
    # cores the web process's encoders and WebRTC stack share, 0.2 on an accelerator or on a CPU
    # engine whose threads leave the web process cores of its own (the default: all cores but one).
    capacity_margin: float | None = None

    # After opening a session a worker admits no other until this long has passed, so the next
    # admission counts what the last one costs live (its web-side load included: see CostModel's
    # load). None: 2 s on a CPU, whose cores the web process shares, 0.5 s on an accelerator.
    settle_s: float | None = None

    @property
    def margin(self) -> float:
        if self.capacity_margin is not None:
            return self.capacity_margin
        shares_cores = self.device == "cpu" and (self.threads is None or self.threads >= len(os.sched_getaffinity(0)))
        return 0.35 if shares_cores else 0.2

    @property
    def settle(self) -> float:
        if self.settle_s is not None:
            return self.settle_s
        return 2.0 if self.device == "cpu" else 0.5
    # One engine over several devices (engine.parallel): its ranks are this worker's subprocesses.
    parallel: ParallelPlan | None = None
    # On a node: the folder of the worker's local socket, where the node's web processes connect
    # (``engine.service.worker_clients``) with ``key``; ``index`` names the worker's socket in it.
    socket_dir: str | None = None
    key: bytes = b""
    index: int = 0
    # Costs a worker this one replaces measured at start-up (``WorkerReady.calibration``): the same
    # engine on the same machine, so this one starts from them instead of calibrating again.
    calibration: dict | None = None

    @property
    def address(self) -> str:
        return os.path.join(self.socket_dir or "", f"engine-{self.index}.sock")

    def on_device(self, device: str) -> WorkerOptions:
        return replace(self, device=device)


def step_frames(pipe) -> int:
    """Video frames one step of ``pipe`` publishes at most: a chunk, a held seam, the first frame."""
    return pipe.frames_per_chunk + pipe.config.schedule.seam * pipe.config.vae.temporal_down + 1


def describe(pipe, preset: str = DEFAULT_PRESET) -> EngineInfo:
    """The engine as the web process sees it; chunk figures are the ``preset``'s (each session
    learns its own when it opens), the frame credit is enough for any preset."""
    from engine.avatars import DEFAULT_AVATAR, avatar_names

    presets = tuple(Preset)
    chosen = pipe.preset(preset)
    return EngineInfo(
        config=pipe.config.name,
        fps=pipe.fps,
        sample_rate=pipe.sample_rate,
        frame_size=tuple(pipe.frame_size),
        accepts_images=bool(pipe.accepts_images),
        presets=presets,
        avatars=tuple(avatar_names()),
        default_avatar=DEFAULT_AVATAR,
        frames_per_chunk=chosen.frames_per_chunk,
        step_frames=max(step_frames(pipe.preset(name)) for name in presets),
        first_chunk_samples=chosen.first_chunk_samples,
    )


def load_core(options: WorkerOptions):
    """Load the pipeline the options name: a ready EngineCore (see :func:`core_from`)."""
    from engine.pipeline import Pipeline

    build = dict(device=options.device, threads=options.threads, guidance=options.guidance, weights=options.weights)
    if options.parallel is not None and not options.parallel.single:
        from engine.parallel.build import build_pipeline

        pipe = build_pipeline(options.parallel, name=options.config, **build)
    else:
        pipe = Pipeline.from_config(options.config, **build)
    costs = None
    if options.calibration:
        from engine.service.core import PRIOR_S
        from engine.service.costs import CostModel

        costs = CostModel.from_calibration(options.calibration, prior_s=PRIOR_S)
    try:
        return core_from(pipe, options, costs)
    except BaseException:
        close_engine(pipe)
        raise


def close_engine(pipe) -> None:
    """End what the engine holds beyond this process (the ranks of a multi-device engine)."""
    close = getattr(pipe, "close", None)
    if close is not None:
        close()


def core_from(pipe, options: WorkerOptions, costs=None):
    """An EngineCore over a loaded pipeline: warmed up (kernels chosen, bundled avatars'
    references encoded) and its batch costs measured, unless ``costs`` are given already."""
    from engine.pipeline import warm_up
    from engine.service.core import EngineCore

    core = EngineCore(pipe, describe(pipe, options.default_preset), costs=costs, max_batch=options.max_batch,
                      default_preset=options.default_preset, capacity_margin=options.margin,
                      default_render=Render.DRAWN if options.drawn else Render.DECODED)
    if options.warm_up:
        t0 = time.perf_counter()
        frames = warm_up(pipe)
        log.info("engine warmed up: %d frames in %.2f s", frames, time.perf_counter() - t0)
    if costs is None:
        calibrate(core, options.calibrate)
    return core


def calibration_spec(preset: str, render: Render) -> SessionSpec:
    """A session of ``preset`` whose frames are made the ``render`` way; a photo session's photo is
    the default avatar's portrait at a photo's size."""
    if render == Render.PHOTO:
        return SessionSpec(preset=preset, photo=calibration_photo())
    return SessionSpec(preset=preset, drawn=render == Render.DRAWN)


@functools.cache
def calibration_photo():
    from engine.avatars import DEFAULT_AVATAR, avatar_image
    from engine.photo.avatar import PHOTO_SIZE, photo_avatar

    return photo_avatar(avatar_image(DEFAULT_AVATAR, (PHOTO_SIZE, PHOTO_SIZE)))


# The most batches one calibration group runs: enough for every kind of work a session needs (its N
# and I chunks, and its frames drawn apart) to run ``rounds`` times.
CALIBRATION_RUNS = 64


def calibrate(core, sizes: tuple[int, ...], rounds: int = 2) -> None:
    """Time silent sessions' work of every kind a session needs (N and I chunks, frames drawn
    apart, both presets) at each batch size, ``rounds`` times, so the capacity figure and the
    scheduler's estimates are measured before the first real session arrives: every preset's
    rendered the worker's default way, and the default preset's rendered every other way the engine
    can (``/v1/engine`` shows the capacity of each). Batches are formed here, not by the scheduler:
    it can only learn that a batch pays once one has run. What it measured becomes the costs'
    baseline."""
    info = core.info
    for preset, render, size in itertools.product(core.presets, core.pipe.renders, sizes):
        if render != core.default_render and preset != core.default_preset:
            continue
        names = [f"_calibrate{preset}{render}{size}_{i}" for i in range(size)]
        spec = calibration_spec(preset, render)
        for name in names:
            core.open(name, spec, core.slot_frames)
            core.push(name, 0, np.zeros(info.sample_rate * 8, np.float32))
        wanted = set(core.work_per_period(preset, render))
        try:
            for run in range(CALIBRATION_RUNS):  # 4 rounds at least (the first runs are cold), then on
                if run >= 4 * rounds and all(core.costs.count(k, size) >= rounds for k in wanted):
                    break
                groups: dict = {}
                for c in core.candidates(core.clock()):
                    groups.setdefault(c.key, []).append(c)
                full = [g for g in groups.values() if len(g) == size]
                if not full:
                    break
                for group in full:
                    core.run([c.session for c in group], group[0].cost_key)
                for name in names:  # frames are dropped: give the slots straight back
                    core.sessions[name].free_slots = deque(range(core.slot_frames))
        finally:
            for name in names:
                core.close(name)
    core.batches = core.batched_sessions = 0
    core.costs.set_baseline()


class Worker:
    """The loop state: the core, the sessions' slots, the clients and their commands."""

    def __init__(self, conn, core, options: WorkerOptions, attach: AttachSlots = FrameSlots.attach) -> None:
        self.core = core
        self.options = options
        self.attach = attach
        self.slots: dict[str, FrameSlots] = {}
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.clients = Clients(self.inbox, conn)
        self.running = True
        self._last_stats = 0.0
        self._opened_at = -float("inf")  # when the newest session opened (admission waits options.settle)
        self.shared_batches = 0  # batches whose sessions belonged to more than one client

    def run(self) -> None:
        self.clients.start()
        # An engine over several ranks raises RanksLost here once one has ended: the worker ends
        # with it (before a batch that failed for that reason is reported), so its sessions get
        # engine_lost and the pool starts a replacement.
        ranks_alive = getattr(self.core.pipe, "check", lambda: None)
        try:
            while self.running:
                self._drain(block=not self.core.due())
                if not self.running:
                    break
                outcome = self.core.step()
                ranks_alive()
                if outcome is not None:
                    self._publish(outcome)
                self.report()
        finally:
            self.clients.close()
            for name in list(self.slots):
                self._close(name)

    def _drain(self, block: bool) -> None:
        try:
            msg = self.inbox.get(timeout=IDLE_WAIT_S) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._take(msg)
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _take(self, item) -> None:
        match item:
            case ClientJoined(client):
                self.clients.send(client, WorkerReady(os.getpid(), self.options.device, self.core.info,
                                                      self.core.costs.calibration()))
                self.report(force=True, only=client)
            case ClientGone(client, reason):
                if client == OWNER:
                    self.running = False  # the process that started this worker is gone
                    return
                owned = self.clients.drop(client)
                if owned is None:
                    return
                log.info("web process %d left (%s): %d sessions closed", client, reason, len(owned))
                for name in owned:
                    self._close(name)
            case (client, msg):
                self._apply(client, msg)

    def _apply(self, client: int, msg) -> None:
        core = self.core
        if isinstance(msg, OpenSession):
            self._open(client, msg)
            return
        if isinstance(msg, Shutdown):
            if client == OWNER:
                self.running = False
            else:
                self._take(ClientGone(client, "it said goodbye"))
            return
        if not self.clients.owns(client, msg.session):
            return  # another web process's session, or one closed meanwhile
        match msg:
            case PushAudio(session, start, samples):
                core.push(session, start, samples)
            case ReleaseSlots(session, slots):
                core.release(session, slots)
            case SetOrigin(session, origin):
                core.set_origin(session, origin)
            case SilenceFrom(session, sample):
                core.silence_from(session, sample)
            case CloseSession(session):
                self._close(session)

    def _admission(self) -> SessionOpened | None:
        """A refusal when the worker is full or still measuring its newest session. The web
        process checks the same before it asks; on a node, another web process may have taken
        the room since its last report."""
        wait = self._opened_at + self.options.settle - time.monotonic()
        if wait > 0 and self.core.sessions:
            return SessionOpened("", "the engine worker is measuring its newest session", code="at_capacity",
                                 retry_after_s=max(1, math.ceil(wait)))
        if self.core.capacity() <= 0:
            return SessionOpened("", "the engine worker is at its real-time capacity", code="at_capacity")
        return None

    def _open(self, client: int, msg: OpenSession) -> None:
        from engine.service.core import SessionRefused

        def refuse(reply: SessionOpened) -> None:
            self.clients.send(client, replace(reply, session=msg.session))

        if msg.session in self.core.sessions:
            refuse(SessionOpened("", f"session {msg.session} is already open"))
            return
        refusal = self._admission()
        if refusal is not None:
            refuse(refusal)
            return
        info = self.core.info
        try:
            slots = self.attach(msg.slots_address, msg.slot_count, msg.spec.frame_size(info), info.samples_per_frame)
        except (OSError, ValueError) as exc:
            refuse(SessionOpened("", f"frame slots unusable: {exc}"))
            return
        try:
            session = self.core.open(msg.session, msg.spec, msg.slot_count)
        except SessionRefused as exc:
            slots.close()
            refuse(SessionOpened("", str(exc)))
            return
        self._opened_at = time.monotonic()
        self.slots[msg.session] = slots
        self.clients.owner_of[msg.session] = client
        self.clients.send(client, SessionOpened(msg.session, None, session.level, session.ladder[session.level].name,
                                                session.pipe.frames_per_chunk, session.stream.first_chunk_samples,
                                                session.stream.lookahead_samples))

    def _close(self, name: str) -> None:
        self.core.close(name)
        self.clients.owner_of.pop(name, None)
        slots = self.slots.pop(name, None)
        if slots is not None:
            slots.close()

    def _publish(self, outcome) -> None:
        send = self.clients.to_owner_of
        if len({self.clients.owner_of.get(name) for name in outcome.batch}) > 1:
            self.shared_batches += 1
        for name, message in outcome.failed.items():
            log.error("session %s failed in the engine: %s", name, message)
            send(name, SessionFailed(name, message))
            self._close(name)
        for name, frames in outcome.frames.items():
            slots = self.slots[name]
            refs = []
            for slot, frame in frames:
                slots.write(slot, frame.rgb, frame.audio)
                refs.append(FrameRef(slot, frame.index, frame.chunk))
            if refs:
                send(name, FramesReady(name, tuple(refs)))
        for change in outcome.changes:
            s = self.core.sessions.get(change.session)
            if s is not None:
                name = s.ladder[change.new].name
                send(change.session, QualityLevelChanged(change.session, change.new, name, change.reason))

    def report(self, force: bool = False, only: int | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_stats < STATS_INTERVAL_S:
            return
        if only is None:
            self._last_stats = now
        core = self.core
        self.clients.send_stats(WorkerStats(
            pid=os.getpid(),
            device=self.options.device,
            sessions=len(core.sessions),
            capacity=core.capacity(),
            batches=core.batches,
            due=core.due(),
            batch_mean=round(core.batch_mean, 3),
            chunk_ms=core.costs.stage_ms(),
            quality_levels={sid: s.level for sid, s in core.sessions.items()},
            quality_changes=core.quality.counts(),
            state_bytes=core.state_bytes(),
            costs=core.costs.snapshot(),
            real_time=core.real_time_sessions(),
            real_time_by_render=core.real_time_by_render(),
            shared_batches=self.shared_batches,
        ), only=only)


def serve(conn, options: WorkerOptions, load=None, attach: AttachSlots = FrameSlots.attach) -> None:
    """A worker's whole life: load (``load(options)``, default :func:`load_core`), report ready
    (or why not), serve until told to stop; ``attach`` finds a session's slots by their address."""
    try:
        core = (load or load_core)(options)
    except Exception as exc:
        log.exception("engine worker could not start")
        conn.send(WorkerFailed(f"{exc.__class__.__name__}: {exc}"))
        return
    worker = Worker(conn, core, options, attach)
    log.info("engine start-up's %d objects kept out of later collections", freeze_heap())
    try:
        if options.socket_dir is not None:  # open to the node's web processes before saying ready
            worker.clients.listen(options.address, options.key)
        worker.report(force=True, only=OWNER)  # the capacity figure is there by the time the worker is ready
        worker.clients.send(OWNER, WorkerReady(os.getpid(), options.device, core.info, core.costs.calibration()))
        worker.run()
    finally:
        close_engine(core.pipe)


def process_main(conn, options: WorkerOptions) -> None:
    """Entry point of a worker subprocess."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine[%(process)d] %(levelname)s %(message)s")
    try:
        serve(conn, options)
    finally:
        conn.close()
