"""Mouth-to-screen latency through ``avatar serve`` in its own process, with an aiortc client on loopback.

Mirror mode: the client's microphone plays speech bursts between silences; agent mode: the
client pushes the same bursts with ``audio.append`` after idle, says a sentence with ``speak``,
and interrupts long utterances at several points. Each latency runs from the first audio of a burst (sent, or
pushed) to the half-rise of the mouth's openness in the frames the client receives, read by the
evaluation's openness probe; the interrupt from ``interrupt`` to the mouth closed and staying
closed. Prints each figure's median and range, and the latency budget: every burst's latency
split into terms read off the server's latency trace (``GET /v1/sessions/{id}/trace``), all on
the clock the processes of one machine share.

    python bench/latency.py [--bursts 5] [--config tiny] [--threads N] [--quality fast] [--image PHOTO] [--load N]
                            [--voice AUDIO]

The bursts are a real speaker's voice; ``--voice espeak`` takes espeak-ng's, whose phones the heard
mouth recognises less surely (its first syllables barely open the mouth).

``--load N`` keeps N other sessions live on the same server while it measures, in the soak's mix
(one mirror session looping speech, the rest agents speaking 3 s utterances between 2 s silences,
every third interrupted; their clients decode what they receive, on this machine): the figures
with the server busy, and each load session's deadline misses over the measurement.

With ``--image`` the sessions animate that photograph (``image`` in ``POST /v1/sessions``) and the
mouth is read by the face mesh; ``AVATAR_DRAWN=1`` in the environment draws the bundled avatar.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name

from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription  # noqa: E402
from aiortc.mediastreams import MediaStreamError  # noqa: E402
from server_helpers import spawned_server, speech_pcm16  # noqa: E402
from traffic_helpers import SoakSession, agent_traffic, open_admitted  # noqa: E402

from engine.avatars import avatar_image  # noqa: E402
from engine.eval.probe import load_probe, measure_openness  # noqa: E402
from server.config import default_engine_threads  # noqa: E402

RATE = 16_000
VIDEO_TICKS = 90_000 // 25  # RTP video clock ticks per frame
LOUD = 0.05  # peak (of full scale) that counts as voice in the server's trace
BURST_S, GAP_S = 1.6, 4.0  # gaps longer than any latency: each burst's response stands alone
PACKET = RATE // 50
INTERRUPTS = 4
# A real speaker (a clip of the lip-sync evaluation set, engine/eval/real_mouths/SOURCES.md): the
# mouth is heard from the phones said, and a synthetic voice is heard less surely than a person.
REAL_VOICE = ROOT / "engine" / "eval" / "real_mouths" / "retalk3.mp4"


class BurstMic(MediaStreamTrack):
    """A microphone that is silent except for the bursts :meth:`speak` schedules; it records when
    each burst's first packet left."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[np.ndarray] = []
        self._current = np.zeros(0, np.int16)
        self._n = 0
        self._start: float | None = None
        self.onsets: list[float] = []

    def speak(self, pcm: np.ndarray) -> None:
        self._pending.append(pcm)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        delay = self._start + self._n * 0.02 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if not self._current.size and self._pending:
            self._current = self._pending.pop(0)
            self.onsets.append(time.monotonic())
        chunk, self._current = self._current[:PACKET], self._current[PACKET:]
        chunk = np.pad(chunk, (0, PACKET - chunk.size))
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = RATE, self._n * PACKET, Fraction(1, RATE)
        self._n += 1
        return frame


class Viewer:
    """The received video: (arrival, rgb) per frame, and each frame's RTP timestamp (90 kHz)."""

    def __init__(self) -> None:
        self.frames: list[tuple[float, np.ndarray]] = []
        self.pts: list[int] = []

    async def run(self, track) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if track.kind == "video":
                self.frames.append((time.monotonic(), frame.to_ndarray(format="rgb24")))
                self.pts.append(int(frame.pts))

    def slot_arrivals(self, shown: list) -> dict[int, float]:
        """Arrival of each output slot the server released (``shown``: its trace's (t, slot, frame)).

        The RTP timestamps count slots from a random origin; of the origins that put no frame's
        arrival before its release, the one giving the shortest trip is the sender's (a wrong one
        is a whole 40 ms slot off)."""
        if not self.pts or not shown:
            return {}
        ticks = np.array([(p - self.pts[0]) % 2**32 for p in self.pts]) // VIDEO_TICKS
        arrived = np.array([t for t, _ in self.frames])
        released = {slot: t for t, slot, _ in shown}
        best: tuple[float, int] | None = None
        for base in range(min(released), max(released) + 1):
            trips = [arrived[i] - released[base + k] for i, k in enumerate(ticks) if base + k in released]
            if len(trips) < 10 or min(trips) < 0:
                continue
            if best is None or float(np.median(trips)) < best[0]:
                best = (float(np.median(trips)), base)
        if best is None:
            return {}
        return {best[1] + int(k): float(t) for k, t in zip(ticks, arrived, strict=True)}


def half_rise(times: np.ndarray, openness: np.ndarray, t0: float, window_s: float = 3.0) -> float | None:
    """Seconds from ``t0`` to the first frame at least halfway from the idle level before ``t0``
    to the peak in the window after it."""
    before = openness[(times >= t0 - 1.0) & (times < t0)]
    after_mask = (times >= t0) & (times < t0 + window_s)
    if before.size < 5 or not after_mask.any():
        return None
    idle, peak = float(np.median(before)), float(np.percentile(openness[after_mask], 95))
    if peak - idle < 0.1:
        return None
    above = np.nonzero(after_mask & (openness >= idle + 0.5 * (peak - idle)))[0]
    return float(times[above[0]] - t0) if above.size else None


def closed_after(times: np.ndarray, openness: np.ndarray, t0: float, level: float, hold_s: float = 0.5) -> float | None:
    """Seconds from ``t0`` until the openness stays below ``level`` for ``hold_s``."""
    for i in np.nonzero(times >= t0)[0]:
        stretch = (times >= times[i]) & (times < times[i] + hold_s)
        if np.all(openness[stretch] < level):
            return float(times[i] - t0)
    return None


def burst_pcm(voice: str = "espeak") -> np.ndarray:
    """The burst: ``BURST_S`` of ``voice`` (an audio or video file, or ``espeak`` for espeak-ng's
    voice) from its first voiced sample, int16."""
    if voice == "espeak":
        speech = speech_pcm16(RATE)
    else:
        from engine.media.audio_io import load_audio
        from server.media.audio import float_to_pcm16

        speech = float_to_pcm16(load_audio(Path(voice), RATE))
    voiced = np.nonzero(np.abs(speech) > 0.05 * 32768)[0]
    start = int(voiced[0]) if voiced.size else 0
    return speech[start:start + int(BURST_S * RATE)]


class Refused(Exception):
    """The server had no room for a session the measurement needs."""


async def session(srv, mode: str, body: dict, mic: MediaStreamTrack | None):
    """A session of ``mode`` (``body``: the rest of ``POST /v1/sessions``) and its aiortc peer."""
    for _ in range(20):  # a worker still measuring the last session answers 503 with Retry-After
        res = await srv.http.post("/v1/sessions", json={"mode": mode, **body})
        if res.status_code != 503 or "retry-after" not in res.headers:
            break
        await asyncio.sleep(float(res.headers["retry-after"]) + 0.5)
    if res.status_code == 503:
        raise Refused(f"the server refused the measured {mode} session: {res.json()['error']['message']}")
    res.raise_for_status()
    s = res.json()
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if mic is not None:
        pc.addTrack(mic)
    else:
        pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    viewer = Viewer()
    pc.on("track", lambda track: asyncio.ensure_future(viewer.run(track)))
    await pc.setLocalDescription(await pc.createOffer())
    answer = await srv.http.post(f"/v1/sessions/{s['session_id']}/offer",
                                 headers={"Authorization": f"Bearer {s['token']}"},
                                 json={"sdp": pc.localDescription.sdp, "type": "offer"})
    answer.raise_for_status()
    await pc.setRemoteDescription(RTCSessionDescription(**answer.json()))
    import websockets

    ws = await websockets.connect(f"{srv.ws_url}/v1/sessions/{s['session_id']}/control?token={s['token']}",
                                  max_size=2**24)
    return s, pc, viewer, ws


async def close(srv, s: dict, pc, ws) -> None:
    await srv.http.delete(f"/v1/sessions/{s['session_id']}", headers={"Authorization": f"Bearer {s['token']}"})
    await pc.close()
    await ws.close()


# Frames as received (T, H, W, 3) -> the mouth's openness in each.
Mouth = Callable[[np.ndarray], np.ndarray]


def probe_mouth(reference: np.ndarray) -> Mouth:
    """A bundled avatar's mouth, read by the evaluation's openness probe beside its reference."""
    return lambda frames: measure_openness(frames, reference)


def mesh_mouth(photo: np.ndarray) -> Mouth:
    """A photo avatar's mouth: the face mesh's inner-lip gap over the eyes' distance, read off the
    frames of ``photo``'s crop as ``avatar eval --image`` reads them."""
    from engine.eval.photo import MeshReader, lip_openness
    from engine.photo.avatar import photo_avatar

    box = photo_avatar(photo).face.box

    def read(frames: np.ndarray) -> np.ndarray:
        mesh = MeshReader(box)
        return np.array([lip_openness(mesh(frame)) for frame in frames], np.float32)

    return read


def openness_of(viewer: Viewer, mouth: Mouth) -> tuple[np.ndarray, np.ndarray]:
    times = np.array([t for t, _ in viewer.frames])
    return times, mouth(np.stack([rgb for _, rgb in viewer.frames]))


async def events_until(ws, kinds: set[str], out: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        event = json.loads(await ws.recv())
        out.append((time.monotonic(), event))


async def get_trace(srv, s: dict) -> dict:
    res = await srv.http.get(f"/v1/sessions/{s['session_id']}/trace",
                             headers={"Authorization": f"Bearer {s['token']}"})
    res.raise_for_status()
    return res.json()


def budget(trace: dict, onset: float, slots: dict[int, float], times: np.ndarray, openness: np.ndarray,
           lookahead_samples: int, spf: int, heard: bool) -> dict[str, float] | None:
    """One burst's latency split into terms, each read off the server's trace (one clock for all).

    transport_in: the burst's first packet sent -> the server's microphone has it (mirror);
    intake_feed: -> its first loud block fed to the engine (the feed clock's holdback and tick, or
    an agent's queue); chunk_wait: -> the last audio its chunk needs fed (the rest of the chunk and
    the lookahead); queue_compute: -> the chunk's frames at the server (scheduling, compute,
    transfer); playout: -> the onset frame released to the track (the playout delay and the slack
    of a frame early in its chunk); transport_out: -> the client has that frame (encode, network,
    jitter buffer, decode); mouth_rise: -> the mouth is half open on the client's screen."""
    out: dict[str, float] = {}
    t = onset
    if heard:
        mic = [e for e in trace["mic"] if e[0] >= onset and e[2] > LOUD]
        if not mic:
            return None
        out["transport_in"] = mic[0][0] - t
        t = mic[0][0]
    fed = [e for e in trace["fed"] if e[0] >= t and e[3] > LOUD]
    if not fed:
        return None
    t_fed, start = fed[0][0], fed[0][1]
    out["intake_feed"] = t_fed - t
    frames = [e for e in trace["generated"] if e[1] >= start // spf and e[2] > LOUD]
    if not frames:
        return None
    t_gen, onset_frame = frames[0][0], frames[0][1]
    chunk_end = max(i for tt, i, _ in trace["generated"] if tt == t_gen) + 1
    needed = chunk_end * spf + lookahead_samples
    covered = [e[0] for e in trace["fed"] if e[1] + e[2] >= needed]
    t_needed = covered[0] if covered else t_gen
    out["chunk_wait"] = t_needed - t_fed
    out["queue_compute"] = t_gen - t_needed
    shown = [e for e in trace["shown"] if e[2] is not None and e[2] >= onset_frame]
    if not shown:
        return None
    t_rel, slot = shown[0][0], shown[0][1]
    out["playout"] = t_rel - t_gen
    half = half_rise(times, openness, onset)
    if slot in slots and half is not None:
        out["transport_out"] = slots[slot] - t_rel
        out["mouth_rise"] = onset + half - slots[slot]
    return out


def budgets(traces: list[dict], onsets: list[float], viewer: Viewer, mouth: Mouth, info: dict,
            heard: bool) -> list[dict[str, float]]:
    times, opened = openness_of(viewer, mouth)
    spf = RATE // info["fps"]
    out = []
    for trace, onset in zip(traces, onsets, strict=False):
        b = budget(trace, onset, viewer.slot_arrivals(trace["shown"]), times, opened, info["lookahead_samples"],
                   spf, heard)
        if b is not None:
            out.append(b)
    return out


async def mirror(srv, body: dict, pcm: np.ndarray, bursts: int, mouth: Mouth, info: dict) -> dict:
    mic = BurstMic()
    s, pc, viewer, ws = await session(srv, "mirror", body, mic)
    await asyncio.sleep(4.0)
    traces = []
    for _ in range(bursts):
        mic.speak(pcm)
        await asyncio.sleep(BURST_S + GAP_S)
        traces.append(await get_trace(srv, s))
    metrics = [json.loads(m) for m in await drain(ws)]
    await close(srv, s, pc, ws)
    times, opened = openness_of(viewer, mouth)
    lat = [half_rise(times, opened, t) for t in mic.onsets]
    delays = [m["playout_delay_ms"] for m in metrics if m.get("type") == "metrics"]
    return {"mouth_to_screen_s": [x for x in lat if x is not None], "playout_delay_ms": delays[-1] if delays else None,
            "budget": budgets(traces, mic.onsets, viewer, mouth, info, heard=True)}


async def drain(ws, wait_s: float = 0.2) -> list[str]:
    out = []
    while True:
        try:
            out.append(await asyncio.wait_for(ws.recv(), wait_s))
        except (TimeoutError, Exception):
            return out


async def agent(srv, body: dict, pcm: np.ndarray, bursts: int, mouth: Mouth, info: dict) -> dict:
    s, pc, viewer, ws = await session(srv, "agent", body, None)
    events: list = []
    stop = asyncio.Event()
    reader = asyncio.create_task(events_until(ws, set(), events, stop))
    await asyncio.sleep(4.0)
    pushed, traces = [], []
    for i in range(bursts):
        pushed.append(time.monotonic())
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": RATE, "utterance_id": f"b{i}",
                                  "audio": base64.b64encode(pcm.tobytes()).decode()}))
        await ws.send(json.dumps({"type": "audio.commit"}))
        await asyncio.sleep(BURST_S + GAP_S)
        traces.append(await get_trace(srv, s))
    t_speak = time.monotonic()
    await ws.send(json.dumps({"type": "speak", "text": "Hello there, I am the avatar.", "utterance_id": "hello"}))
    await asyncio.sleep(4.0)
    long = np.tile(pcm, 4)
    interrupts = []
    for i in range(INTERRUPTS):  # each at another point of the speech
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": RATE, "utterance_id": f"long{i}",
                                  "audio": base64.b64encode(long.tobytes()).decode()}))
        await ws.send(json.dumps({"type": "audio.commit"}))
        await asyncio.sleep(1.4 + 0.23 * i)
        interrupts.append(time.monotonic())
        await ws.send(json.dumps({"type": "interrupt"}))
        await asyncio.sleep(3.0)
    stop.set()
    reader.cancel()
    split = budgets(traces, pushed, viewer, mouth, info, heard=False)
    await close(srv, s, pc, ws)
    times, opened = openness_of(viewer, mouth)
    lat = [half_rise(times, opened, t) for t in pushed]
    started = [t for t, e in events if e.get("type") == "playback.started" and e.get("utterance_id") == "hello"]
    idle = float(np.median(opened[(times >= t_speak - 3.0) & (times < t_speak - 0.5)]))
    closed = []
    for t in interrupts:
        peak = float(np.percentile(opened[(times >= t - 1.0) & (times < t)], 95))
        level = idle + 0.25 * (peak - idle)
        before = opened[times < t]
        if before.size and before[-1] >= level:  # the mouth was open when the interrupt left
            after = closed_after(times, opened, t, level)
            if after is not None:
                closed.append(after)
    return {"append_to_mouth_s": [x for x in lat if x is not None],
            "speak_to_started_s": (started[0] - t_speak) if started else None,
            "interrupt_to_closed_s": closed, "budget": split}


class Load:
    """Sessions kept live beside the measured one (the soak's traffic), and their misses."""

    def __init__(self, sessions: list[SoakSession]) -> None:
        self.sessions = sessions
        self.done = asyncio.Event()
        self.traffic = [asyncio.create_task(agent_traffic(s, self.done)) for s in sessions if s.mic is None]

    @classmethod
    async def start(cls, srv, body: dict, count: int) -> Load:
        load = cls(await open_admitted(srv, body, count, warmup_s=5.0) if count else [])
        if load.sessions:
            await asyncio.sleep(5.0)  # past their warm-up: the measurement sees steady traffic
        return load

    async def stop(self) -> list[float]:
        """Ends the traffic and closes the sessions: each one's share of deadlines missed after its warm-up."""
        self.done.set()
        await asyncio.gather(*self.traffic)
        for s in self.sessions:
            s.stop.set()
        misses = [s.figures()["miss_ratio"] for s in self.sessions]
        for s in self.sessions:
            await s.close()
        return misses


def fmt(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.2f} s (range {min(values):.2f}-{max(values):.2f}, n={len(values)})"


TERMS = ("transport_in", "intake_feed", "chunk_wait", "queue_compute", "playout", "transport_out", "mouth_rise")


def budget_table(rows: dict[str, list[dict[str, float]]]) -> list[str]:
    """Median (range) of each term in ms, one column per mode, and the sum of the medians."""
    lines = [f"{'term (ms)':<16}" + "".join(f"{mode:>24}" for mode in rows)]
    for term in TERMS:
        cells = []
        for split in rows.values():
            values = [1000 * b[term] for b in split if term in b]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})" if values else "-")
        lines.append(f"{term:<16}" + "".join(f"{c:>24}" for c in cells))
    totals = []
    for split in rows.values():
        medians = [statistics.median([b[t] for b in split if t in b]) for t in TERMS if any(t in b for b in split)]
        totals.append(f"{1000 * sum(medians):.0f}")
    lines.append(f"{'sum of medians':<16}" + "".join(f"{c:>24}" for c in totals))
    return lines


def lookahead_samples(config_name: str, redrawn: bool) -> int:
    """Audio a chunk waits for past its last frame: what ContextGen cuts, or for a redrawn session
    (a photo, a drawn avatar) what its heard mouth waits for, if longer."""
    from engine.config import PUPPET, get_config
    from engine.modules.audio_encoder import AudioEncoder
    from engine.puppet.mouth import MouthTracker
    from engine.stages.redraw import HEARD_LOOKAHEAD_FRAMES

    config = get_config(config_name)
    heard = MouthTracker.lookahead_samples(config.audio.sample_rate, config.fps, HEARD_LOOKAHEAD_FRAMES)
    if config_name == PUPPET:  # the procedural engine draws each frame's mouth from the phones it hears
        return heard
    return max(AudioEncoder.lookahead_samples(config), heard if redrawn else 0)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bursts", type=int, default=5)
    p.add_argument("--config", default="tiny")
    p.add_argument("--threads", type=int, default=default_engine_threads(),
                   help="engine torch threads (default: as avatar serve)")
    p.add_argument("--quality", default="fast", choices=["fast", "quality"])
    p.add_argument("--image", default=None, metavar="PHOTO", help="animate this photograph (PNG/JPEG)")
    p.add_argument("--load", type=int, default=0, metavar="N", help="N other sessions live while measuring")
    p.add_argument("--voice", default=str(REAL_VOICE.relative_to(ROOT)), metavar="AUDIO",
                   help="the bursts' speech: an audio or video file, or 'espeak' (default: a real speaker)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.load < 0:
        p.error("--load must not be negative")
    import aioice.ice

    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    load_probe()
    async with spawned_server(args.config, threads=args.threads, max_sessions=args.load + 1, startup_s=180) as srv:
        info = (await srv.http.get("/v1/info")).json()
        load = await Load.start(srv, {"quality": args.quality}, args.load)
        info["lookahead_samples"] = lookahead_samples(args.config, bool(args.image) or info.get("drawn", False))
        body: dict = {"quality": args.quality}
        if args.image:
            photo = Path(args.image).read_bytes()
            body["image"] = base64.b64encode(photo).decode()
            mouth = mesh_mouth(np.asarray(Image.open(io.BytesIO(photo)).convert("RGB")))
        else:
            mouth = probe_mouth(avatar_image(info["avatars"][0], (info["height"], info["width"])))
        pcm = burst_pcm(args.voice)
        m = await mirror(srv, body, pcm, args.bursts, mouth, info)
        a = await agent(srv, body, pcm, args.bursts, mouth, info)
        engine = (await srv.http.get("/v1/engine")).json()["workers"][0]
        load_misses = await load.stop()
    chunk_ms = sum(engine["chunk_ms"].values())
    what = f"{args.config} / {args.quality}" + (f", photo {args.image}" if args.image else "")
    print(f"{what}, {args.bursts} bursts of {BURST_S} s speech ({Path(args.voice).name}), avatar serve on loopback"
          + (f", {len(load_misses)} of {args.load} load session(s) live (deadline misses while measured: "
             + ", ".join(f"{m:.2%}" for m in load_misses) + ")" if args.load else ""))
    print(f"mirror mouth-to-screen        {fmt(m['mouth_to_screen_s'])}")
    print(f"agent audio.append -> mouth   {fmt(a['append_to_mouth_s'])}")
    speak = a["speak_to_started_s"]
    print(f"speak -> playback.started     {'n/a' if speak is None else f'{speak:.2f} s'}")
    print(f"interrupt -> mouth closed     {fmt(a['interrupt_to_closed_s'])} (interrupts with the mouth open)")
    print(f"engine compute per chunk and session {chunk_ms:.0f} ms (stages "
          + ", ".join(f"{k} {v:.0f}" for k, v in engine["chunk_ms"].items())
          + f"), lookahead {1000 * info['lookahead_samples'] / RATE:.1f} ms, last playout delay "
          f"{m['playout_delay_ms']} ms")
    print("\n".join(budget_table({"mirror": m["budget"], "agent append": a["budget"]})))
    if args.json:
        Path(args.json).write_text(json.dumps({"mirror": m, "agent": a, "engine": engine, "load": args.load,
                                               "load_misses": load_misses}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except Refused as exc:
        sys.exit(f"bench/latency.py: {exc} (with --load N the server must hold N + 1 sessions; GET /v1/engine "
                 "shows how many it holds)")
