"""The web side's CPU per session: ``avatar serve`` in its own process, sessions from aiortc clients in this one.

Every session's WebRTC work (encoding, SRTP, the playout clock, the control socket) runs in the
server process, its asyncio loop on the main thread; the engine runs in worker processes. With the
procedural engine (``--config puppet``, the default) the server process's CPU is the web side's.
Each session is a mirror session whose microphone loops speech, received by an aiortc peer that
decodes the video and voice it is sent, and by ``--viewers`` WHEP viewers that do the same. After
``--warmup`` seconds the server process is measured for ``--window`` seconds: its CPU (all threads),
its event-loop thread's, each thread's by name, and each session's deadline misses (its control
socket's ``metrics`` events).

    python bench/web_side.py [--sessions 1,3,6] [--image astronaut] [--viewers K] [--window 20]
                             [--profile FILE.svg|.json|.txt [--profile-gil]] [--json FILE]
                             [--web-processes N] [--config tiny --device cuda]

``--web-processes N`` serves through the node's front over N web processes sharing its engine
workers (``docs/node.md``): the figures are then the web processes' together (their pids from
``GET /v1/engine``), the loop the sum of their loop threads.

``--image`` animates a photograph (``astronaut``: scikit-image's portrait; 512² with the ``tiny``
engine, which puppet cannot draw) instead of the bundled 256² avatar. ``--profile`` runs
``py-spy record`` on the server process over the window (one file per session count: a flame
graph for ``.svg``, collapsed stacks for ``.txt``, speedscope otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name

import aioice.ice  # noqa: E402
import httpx  # noqa: E402
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription  # noqa: E402
from aiortc.mediastreams import MediaStreamError  # noqa: E402
from image_helpers import image_option  # noqa: E402
from server_helpers import SpeechTrack, spawned_server, speech_pcm16  # noqa: E402

from server.base.protocol import MetricsEvent, SessionCreated  # noqa: E402
from server.client import AvatarError, AvatarSession  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PROFILE_FORMATS = {".svg": "flamegraph", ".txt": "raw"}  # anything else: speedscope


# ---- the server process, from /proc ---------------------------------------------------------


@dataclass
class CpuSample:
    """CPU seconds so far of the whole process (threads that ended included) and of each live thread."""

    at: float
    process_s: float
    threads: dict[int, tuple[str, float]]  # tid -> (comm, seconds)
    loop_sleeps: int  # times the loop thread went to sleep (voluntary context switches): each a wake-up after


def _stat_seconds(path: Path) -> float:
    fields = path.read_text().rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


def cpu_sample(pid: int) -> CpuSample:
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            threads[int(task.name)] = ((task / "comm").read_text().strip(), _stat_seconds(task / "stat"))
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    sleeps = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE).group(1))
    return CpuSample(time.monotonic(), _stat_seconds(Path(f"/proc/{pid}/stat")), threads, sleeps)


def python_thread_names(pid: int) -> dict[int, str]:
    """Each Python thread's name by its OS thread id (``py-spy dump``; empty without py-spy)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        out = subprocess.run([spy, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \([^)]*\): "(.*)"', out, re.MULTILINE)}


def thread_group(name: str) -> str:
    """Threads of one pool under one name: ``ThreadPoolExecutor-0_3`` -> ``ThreadPoolExecutor``."""
    return re.sub(r"([-_]\d+)+$", "", name)


def cores_by_thread(pids: list[int], start: list[CpuSample], end: list[CpuSample],
                    names: dict[int, str]) -> dict[str, float]:
    """Cores each thread group of the processes used between the samples (their loop threads as
    ``loop``), busiest first."""
    groups: dict[str, float] = {}
    for pid, first, last in zip(pids, start, end, strict=True):
        span = last.at - first.at
        for tid, (comm, seconds) in last.threads.items():
            name = "loop" if tid == pid else thread_group(names.get(tid, comm))
            used = seconds - first.threads.get(tid, (comm, 0.0))[1]
            groups[name] = groups.get(name, 0.0) + used / span
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


async def web_pids(srv, processes: int) -> list[int]:
    """The processes that hold the sessions: the server itself, or the node's web processes."""
    if processes == 1:
        return [srv.pid]
    return [w["pid"] for w in (await srv.http.get("/v1/engine")).json()["web_processes"]]


# ---- the clients -----------------------------------------------------------------------------


@dataclass
class Consumed:
    """Frames one peer decoded, per kind, and the video's size."""

    frames: dict[str, int] = field(default_factory=lambda: {"video": 0, "audio": 0})
    size: tuple[int, int] | None = None


async def consume(track: MediaStreamTrack, into: Consumed) -> None:
    """Read every frame aiortc decodes, as a page's player does; an unread track buffers without limit."""
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        into.frames[track.kind] += 1
        if track.kind == "video":
            into.size = (frame.width, frame.height)


def watch(pc: RTCPeerConnection, into: Consumed) -> list[asyncio.Task]:
    return [asyncio.create_task(consume(r.track, into)) for r in pc.getReceivers()]


async def whep_viewer(http: httpx.AsyncClient, info: SessionCreated) -> RTCPeerConnection:
    """A read-only WHEP viewer of the session (``POST /v1/sessions/{id}/whep``)."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    res = await http.post(f"/v1/sessions/{info.session_id}/whep", content=pc.localDescription.sdp,
                          headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {info.token}"})
    res.raise_for_status()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=res.text, type="answer"))
    return pc


class BenchSession:
    """One mirror session fed looped speech: its peer, its viewers, what they decoded, its latest metrics."""

    def __init__(self, client: AvatarSession, peer: RTCPeerConnection, viewers: list[RTCPeerConnection]) -> None:
        self.client = client
        self.viewers = viewers
        self.peer, self.watchers = Consumed(), [Consumed() for _ in viewers]
        self.metrics: MetricsEvent | None = None
        self.tasks = watch(peer, self.peer)
        for pc, into in zip(viewers, self.watchers, strict=True):
            self.tasks += watch(pc, into)
        self.tasks.append(asyncio.create_task(self._read_metrics()))

    @classmethod
    async def open(cls, http: httpx.AsyncClient, body: dict, viewers: int, patience_s: float = 60.0) -> BenchSession:
        deadline = time.monotonic() + patience_s
        while True:  # a worker still measuring its newest session answers 503 with Retry-After
            res = await http.post("/v1/sessions", json=body)
            if res.status_code != 503 or time.monotonic() > deadline:
                break
            await asyncio.sleep(float(res.headers.get("retry-after", 1)) + 0.5)
        if res.status_code != 201:
            raise RuntimeError(f"session {body.get('mode')} refused: {res.status_code} {res.text}")
        info = SessionCreated.model_validate(res.json())
        client = AvatarSession(str(http.base_url), info, httpx.AsyncClient(base_url=http.base_url, timeout=20))
        await client.connect()
        peer = await client.connect_media(SpeechTrack(speech_pcm16(16_000), loop=True), ice_servers=[])
        return cls(client, peer, [await whep_viewer(http, info) for _ in range(viewers)])

    async def _read_metrics(self) -> None:
        async for event in self.client.events():
            if isinstance(event, MetricsEvent):
                self.metrics = event

    async def close(self) -> None:
        for pc in self.viewers:
            await pc.close()
        with contextlib.suppress(AvatarError, httpx.HTTPError):
            await self.client.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


# ---- one measurement ---------------------------------------------------------------------------


@dataclass
class Figures:
    sessions: int
    size: tuple[int, int]
    viewers: int
    window_s: float
    process_cores: float
    loop_cores: float
    loop_wakes: float  # per second
    threads: dict[str, float]
    misses: int
    slots: int
    video_frames: list[int]  # per session: the peer's frames decoded in the window, then each viewer's
    audio_frames: list[int]

    @property
    def miss_ratio(self) -> float:
        return self.misses / max(1, self.slots)


def profiler(pid: int, path: Path, seconds: float, gil: bool) -> subprocess.Popen:
    """``py-spy record`` of every thread (``gil``: only of the one holding the GIL, which leaves out
    the samples of a thread waiting for it), a stack's root naming its thread."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    fmt = PROFILE_FORMATS.get(path.suffix, "speedscope")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(round(seconds)), "--rate", "100",
                             "--threads", "--format", fmt, "--output", str(path), *(["--gil"] if gil else [])],
                            stdout=subprocess.DEVNULL)


def frames_of(sessions: list[BenchSession]) -> list[list[Consumed]]:
    return [[s.peer, *s.watchers] for s in sessions]


async def measure(args: argparse.Namespace, count: int, profile: Path | None) -> Figures:
    extra = ("--web-processes", str(args.web_processes), "--device", args.device)
    async with spawned_server(args.config, threads=args.threads, max_sessions=count, extra=extra) as srv:
        assert srv.pid is not None
        pids = await web_pids(srv, args.web_processes)
        body = {"mode": "mirror", "quality": "fast", **image_option(args.image)}
        sessions = [await BenchSession.open(srv.http, body, args.viewers) for _ in range(count)]
        try:
            await asyncio.sleep(args.warmup)
            before_frames = [[dict(c.frames) for c in peers] for peers in frames_of(sessions)]
            before_metrics = [s.metrics for s in sessions]
            spy = profiler(pids[0], profile, args.window, args.profile_gil) if profile else None
            start = [cpu_sample(pid) for pid in pids]
            await asyncio.sleep(args.window)
            end = [cpu_sample(pid) for pid in pids]
            names = {tid: name for pid in pids for tid, name in python_thread_names(pid).items()}
            if spy is not None:
                spy.wait(60)
            after_metrics = [s.metrics for s in sessions]
            decoded = [[{k: c.frames[k] - b[k] for k in b} for c, b in zip(peers, before, strict=True)]
                       for peers, before in zip(frames_of(sessions), before_frames, strict=True)]
            size = sessions[0].peer.size or (0, 0)
        finally:
            for s in sessions:
                await s.close()
    span = end[0].at - start[0].at
    misses = slots = 0
    for b, a in zip(before_metrics, after_metrics, strict=True):
        if a is None:
            continue
        played = a.frames_played - (b.frames_played if b else 0)
        missed = a.deadline_misses - (b.deadline_misses if b else 0)
        misses, slots = misses + missed, slots + played + missed
    threads = cores_by_thread(pids, start, end, names)
    process_s = sum(e.process_s - s.process_s for s, e in zip(start, end, strict=True))
    wakes = sum(e.loop_sleeps - s.loop_sleeps for s, e in zip(start, end, strict=True))
    return Figures(count, size, args.viewers, span, process_s / span, threads.get("loop", 0.0), wakes / span,
                   threads, misses, slots,
                   [f["video"] for peers in decoded for f in peers], [f["audio"] for peers in decoded for f in peers])


def table(rows: list[Figures]) -> str:
    head = (f"{'sessions':>8} {'size':>9} {'viewers':>7} {'process':>8} {'loop':>6} {'process/s':>9} "
            f"{'loop/s':>7} {'wakes/s':>7} {'misses':>7}  video fps (min)")
    lines = [head]
    for r in rows:
        fps = min(r.video_frames) / r.window_s if r.video_frames else 0.0
        lines.append(f"{r.sessions:>8} {r.size[0]:>4}x{r.size[1]:<4} {r.viewers:>7} {r.process_cores:>8.3f} "
                     f"{r.loop_cores:>6.3f} {r.process_cores / r.sessions:>9.3f} {r.loop_cores / r.sessions:>7.3f} "
                     f"{r.loop_wakes:>7.0f} {100 * r.miss_ratio:>6.2f}%  {fps:.1f}")
    for r in rows:
        busiest = ", ".join(f"{name} {cores:.3f}" for name, cores in r.threads.items() if cores >= 0.001)
        lines.append(f"  {r.sessions} session(s), cores by thread: {busiest}")
    return "\n".join(lines)


def profile_path(base: str | None, count: int, several: bool) -> Path | None:
    if not base:
        return None
    path = Path(base)
    return path.with_name(f"{path.stem}-{count}s{path.suffix}") if several else path


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", default="1,3,6", help="session counts, one server each (default 1,3,6)")
    p.add_argument("--image", default=None, metavar="PHOTO", help="animate this photograph (astronaut: skimage's)")
    p.add_argument("--viewers", type=int, default=0, help="WHEP viewers per session")
    p.add_argument("--config", default=None, help="engine config (default puppet; tiny with --image)")
    p.add_argument("--threads", type=int, default=1, help="engine torch threads")
    p.add_argument("--device", default="cpu", help="the engine's device (cpu | cuda)")
    p.add_argument("--web-processes", type=int, default=1, help="web processes behind the node's front")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--window", type=float, default=20.0)
    p.add_argument("--profile", default=None, metavar="FILE", help="py-spy record the server over the window")
    p.add_argument("--profile-gil", action="store_true", help="profile only the thread holding the GIL")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    args.config = args.config or ("tiny" if args.image else "puppet")
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]  # the server offers only loopback
    counts = [int(n) for n in args.sessions.split(",")]
    rows = []
    for n in counts:
        rows.append(await measure(args, n, profile_path(args.profile, n, len(counts) > 1)))
        print(table(rows[-1:]), flush=True)
    what = f"{args.config} on {args.device}" + (f", photo {args.image}" if args.image else "") \
        + f", {args.web_processes} web process(es), {args.window:.0f} s window"
    print(f"\n{what}\n{table(rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps([{**asdict(r), "miss_ratio": r.miss_ratio} for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
