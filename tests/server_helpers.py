"""Shared pieces of the server tests: the real engine (loaded once), an in-process uvicorn
server on an ephemeral loopback port, a paced speech track and an aiortc client."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from fractions import Fraction

import aioice.ice
import av
import httpx
import numpy as np
import torch
import uvicorn
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError

from engine.batch import Render
from engine.pipeline import Pipeline
from engine.service.core import EngineCore
from engine.service.costs import CostModel
from engine.service.pool import WorkerPool
from engine.service.worker import WorkerOptions, core_from, describe
from server.api.app import create_app
from server.api.engine_adapter import Engine
from server.api.process import prepare_process
from server.api.uvicorn_config import server_config
from server.client import offer_media
from server.config import Settings
from server.node.supervisor import free_port

VIDEO_CLOCK, OPUS_CLOCK = 90_000, 48_000
# aiortc's receiver releases an audio frame once 4 later packets are buffered (prefetch) and a
# video frame once the next frame's first packet arrives: receiver hold-back, not sender skew.
AUDIO_HOLD_S, VIDEO_HOLD_S = 4 * 0.020, 1 / 25
ESPEAK_TEXT = "Hello there. I am a talking avatar, and this is what my voice sounds like."


@functools.cache
def engine_pipeline(config: str = "tiny") -> Pipeline:
    """The real engine (default config ``tiny``). Tests that run it use conftest's ``one_thread``: the
    engine gets one core, the encoders and the event loop the other, and the thread count is restored."""
    return Pipeline.from_config(config, device="cpu")


@functools.cache
def measured_costs(config: str = "tiny", threads: int = 0, drawn: bool = False) -> CostModel:
    """The engine's batch costs on ``threads`` torch threads, measured once per test run (as a
    worker does at start-up): costs measured on two threads would over-state what an engine
    running on one can hold."""
    from engine.service.worker import calibrate

    pipe = engine_pipeline(config)
    core = EngineCore(pipe, describe(pipe), default_render=Render.DRAWN if drawn else Render.DECODED)
    calibrate(core, (1, 2))
    return core.costs


def loaded_engine(config: str = "tiny", warm_up: bool = False, settle_s: float | None = None,
                  drawn: bool = False, capacity_margin: float | None = None) -> Engine:
    """The server's engine for one app: an in-process worker over :func:`engine_pipeline`, with
    the costs :func:`measured_costs` measured (so it starts at once); ``capacity_margin`` as
    :class:`WorkerOptions` takes it."""
    pipe = engine_pipeline(config)
    options = WorkerOptions(config=config, warm_up=warm_up, settle_s=settle_s, drawn=drawn,
                            capacity_margin=capacity_margin)

    def load(opts: WorkerOptions) -> EngineCore:
        return core_from(pipe, opts, costs=copy.deepcopy(measured_costs(config, torch.get_num_threads(), drawn)))

    return Engine(WorkerPool(options, kind="inprocess", load=load))


@functools.cache
def speech_pcm16(rate: int = 16000) -> np.ndarray:
    """A few seconds of real speech from espeak-ng, int16 mono at ``rate``."""
    import subprocess

    from engine.media.espeak import command, read_wav
    from server.media.audio import float_to_pcm16, resample_pcm16

    wav = subprocess.run(command(ESPEAK_TEXT, voice="en"), check=True, capture_output=True).stdout
    pcm, src_rate = read_wav(wav)
    return float_to_pcm16(resample_pcm16(pcm, src_rate, rate))


def loopback_only(monkeypatch) -> None:
    """aioice leaves 127.0.0.1 out of host candidates; in-process tests need exactly that one."""
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.1"])


# A capacity margin below zero: the engine admits sessions beside its live ones whatever its live
# estimate says (``max_sessions`` still bounds them). make_settings' default, for every test not about
# the engine's real-time capacity: on a loaded 2-core box whose cores also run the test's clients, a
# streaming puppet session measures 70-90 ms of every 160 ms chunk live, and any margin of 0 or more
# then refuses a second session while the first lives. Capacity tests ask for ``LIVE_MARGIN``.
ANY_ROOM_MARGIN = -1.0
LIVE_MARGIN = None  # the worker's own default margin


def make_settings(**overrides) -> Settings:
    # Sessions open back to back: admission's settling is what tests/server/session/test_admission.py tests.
    # web_loop_budget 1: the loop here is the test client's too, so its busy share is not the server's alone.
    base = {"max_sessions": 2, "engine_capacity_margin": ANY_ROOM_MARGIN, "peer_timeout_s": 3.0,
            "playout_delay_s": 0.2, "warm_up": False, "engine_settle_s": 0.0,
            "web_loop_budget": 1.0, "page_avatar": None}  # the page starts on the default (drawn) avatar
    base.update(overrides)
    return Settings.model_validate(base)


@dataclass
class Running:
    url: str
    app: object
    http: httpx.AsyncClient
    pid: int | None = None  # the server's process, when it runs in its own

    @property
    def manager(self):
        return self.app.state.manager

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http") :]


@contextlib.asynccontextmanager
async def running_server(settings: Settings | None = None, config: str = "tiny",
                         inprocess: bool = True) -> AsyncIterator[Running]:
    """The app on uvicorn in this process; its engine an in-process worker over the cached
    ``config`` pipeline, or (``inprocess=False``) the engine workers the settings name."""
    settings = settings or make_settings()
    engine = (loaded_engine(config, settings.engine.warm_up, settings.engine.engine_settle_s, settings.session.drawn,
                            settings.engine.engine_capacity_margin)
              if inprocess else None)
    app = create_app(settings, engine)
    async with serving(app, settings) as running:
        yield running


@contextlib.asynccontextmanager
async def serving(app, settings: Settings) -> AsyncIterator[Running]:
    """``app`` on uvicorn in this process, on an ephemeral loopback port, until the block ends."""
    # Keep-alive longer than any test's pause between requests: uvicorn closing an idle connection
    # just as the client reuses it reads as a ReadError.
    prepare_process(settings.network)
    config = server_config(app, settings, "warning", host="127.0.0.1", port=0, timeout_keep_alive=120)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        try:
            yield Running(url, app, http)
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 20)


async def admitted_session(srv: Running, body: dict | None = None, patience_s: float = 5.0) -> dict:
    """``POST /v1/sessions`` (201 asserted), retried for ``patience_s`` while the engine answers 503: a
    slot freed a moment ago takes the engine's capacity a moment to count."""
    for _ in range(round(patience_s / 0.1)):
        res = await srv.http.post("/v1/sessions", json=body or {})
        if res.status_code != 503:
            break
        await asyncio.sleep(0.1)
    assert res.status_code == 201, res.text
    return res.json()


@contextlib.asynccontextmanager
async def spawned_server(config: str = "tiny", threads: int = 2, max_sessions: int = 1,
                         startup_s: float = 180.0, log_level: str = "warning", extra: tuple[str, ...] = (),
                         env: dict[str, str] | None = None) -> AsyncIterator[Running]:
    """``avatar serve`` in its own process (as deployed: the client is not sharing its GIL); ``extra``
    flags and ``env`` variables added."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    port = free_port()
    script = Path(__file__).with_name("serve_loopback.py")
    cmd = [sys.executable, str(script), "--port", str(port), "--config", config, "--threads", str(threads),
           "--max-sessions", str(max_sessions), "--log-level", log_level, *extra]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            deadline = time.monotonic() + startup_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"avatar serve exited with {proc.returncode}")
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("avatar serve did not come up")
                await asyncio.sleep(0.2)
            yield Running(url, None, http, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SpeechTrack(MediaStreamTrack):
    """A microphone stand-in: int16 mono PCM in 20 ms frames, paced in real time, then silence
    (or the clip again, with ``loop``)."""

    kind = "audio"

    def __init__(self, pcm: np.ndarray, rate: int = 16000, loop: bool = False) -> None:
        super().__init__()
        self._pcm = pcm
        self._rate = rate
        self._loop = loop
        self._n = 0
        self._start: float | None = None
        self.sent_samples = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        step = self._rate // 50
        if self._start is None:
            self._start = time.monotonic()
        delay = self._start + self._n * 0.02 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        start = self._n * step % self._pcm.size if self._loop else self._n * step
        chunk = self._pcm[start : start + step]
        chunk = np.pad(chunk, (0, step - chunk.size))
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1).astype(np.int16), format="s16", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._n * step
        frame.time_base = Fraction(1, self._rate)
        self._n += 1
        self.sent_samples += step
        return frame


@dataclass
class Received:
    """What the client got on one track: (pts, arrival time, payload) per frame."""

    kind: str
    pts: list[int] = field(default_factory=list)
    arrival: list[float] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    audio: list[np.ndarray] = field(default_factory=list)
    time_base: Fraction | None = None


def release_phase(rx: Received, clock: int, start: int = 0, stop: int | None = None) -> float:
    """Median of (arrival - media time) over frames [start, stop): when the track plays media time 0."""
    pts = np.asarray(rx.pts[start:stop], dtype=np.int64)
    arrival = np.asarray(rx.arrival[start:stop])
    return float(np.median(arrival - (pts - rx.pts[0]) / clock))


def av_offset(video: Received, audio: Received, window: tuple[float, float] | None = None) -> float:
    """Seconds by which the audio the client gets lags the video it gets (receiver hold-back removed).

    Both tracks start at the same media instant, so each track's first frame anchors its media time.
    ``window`` limits the estimate to frames that arrived within (t0, t1) on the monotonic clock.
    """

    def phase(rx: Received, clock: int) -> float:
        if window is None:
            return release_phase(rx, clock)
        idx = np.flatnonzero((np.asarray(rx.arrival) >= window[0]) & (np.asarray(rx.arrival) < window[1]))
        return release_phase(rx, clock, int(idx[0]), int(idx[-1]) + 1)

    return (phase(audio, OPUS_CLOCK) - AUDIO_HOLD_S) - (phase(video, VIDEO_CLOCK) - VIDEO_HOLD_S)


async def collect(track: MediaStreamTrack, into: Received, until: asyncio.Event, keep_audio: bool = True) -> None:
    while not until.is_set():
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        into.arrival.append(time.monotonic())
        into.pts.append(frame.pts)
        into.time_base = frame.time_base
        if isinstance(frame, av.VideoFrame):
            into.shapes.append((frame.height, frame.width))
        elif keep_audio:
            into.audio.append(frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0].copy())


async def connect_client(srv: Running, session: dict, mic: MediaStreamTrack | None) -> RTCPeerConnection:
    """Offer from an aiortc client (mic track, or recv-only audio) and apply the server's answer."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    await offer_media(srv.http, session["session_id"], session["token"], pc, mic)
    return pc


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("engine-", "recorder-"))]


def session_tasks() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("s_")]


async def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Whether ``predicate()`` (a value, or an awaitable of one: an HTTP poll) holds within ``timeout_s``."""

    async def holds() -> bool:
        result = predicate()
        return bool(await result if inspect.isawaitable(result) else result)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await holds():
            return True
        await asyncio.sleep(interval_s)
    return await holds()
