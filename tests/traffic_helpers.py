"""Live traffic against a running server, as the soak and the latency bench's ``--load`` make it:
one mirror session whose microphone loops speech, the rest agent sessions speaking 3 s utterances
with 2 s of silence between them, every third one interrupted 1 s in; each session's control-socket
metrics and received media are kept for its figures."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import websockets
from agent_helpers import append_message
from server_helpers import Received, SpeechTrack, av_offset, collect, connect_client, speech_pcm16


async def agent_traffic(session: SoakSession, stop: asyncio.Event) -> int:
    """Utterances of 3 s with 2 s of silence between, every third one interrupted after 1 s;
    returns how many were interrupted."""
    rate = session.session["sample_rate"]
    speech = speech_pcm16(rate)[: 3 * rate]
    n = interrupted = 0
    while not stop.is_set():
        n += 1
        await session.ws.send(json.dumps(append_message(speech, rate, f"u{n}")))
        await session.ws.send(json.dumps({"type": "audio.commit"}))
        if n % 3 == 0:
            await asyncio.sleep(1.0)
            await session.ws.send(json.dumps({"type": "interrupt"}))
            interrupted += 1
        await asyncio.wait([asyncio.ensure_future(session.finished(f"u{n}")), asyncio.ensure_future(stop.wait())],
                           timeout=15.0, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(2.0)  # silence: idle motion
    return interrupted


def last_before(metrics: list[tuple[float, dict]], t: float) -> dict:
    return [m for at, m in metrics if at <= t][-1]


class SoakSession:
    """One session (mirror: fed looped speech; agent: driven by :func:`agent_traffic`), its
    control-socket metrics and received media."""

    def __init__(self, srv, options: dict, warmup_s: float = 15.0) -> None:
        self.srv, self.options, self.warmup_s = srv, options, warmup_s
        self.metrics: list[tuple[float, dict]] = []
        self.video, self.audio, self.stop = Received("video"), Received("audio"), asyncio.Event()
        self.played: dict[str, asyncio.Event] = {}
        self.mic = SpeechTrack(speech_pcm16(), loop=True) if options["mode"] == "mirror" else None

    async def start(self) -> bool:
        """Open the session (False: refused at capacity)."""
        res = await self.srv.http.post("/v1/sessions", json=self.options)
        if res.status_code == 503 and res.json()["error"]["code"] == "at_capacity":
            return False
        assert res.status_code == 201, res.text
        self.session = s = res.json()
        url = f"{self.srv.ws_url}/v1/sessions/{s['session_id']}/control?token={s['token']}"
        self.ws = await websockets.connect(url)
        self.reader = asyncio.create_task(self._read())
        self.t0 = time.monotonic()
        self.pc = await connect_client(self.srv, s, self.mic)
        self.tasks = [asyncio.create_task(collect(r.track, self.video if r.track.kind == "video" else self.audio,
                                                  self.stop, False)) for r in self.pc.getReceivers()]
        return True

    async def _read(self) -> None:
        async for raw in self.ws:
            event = json.loads(raw)
            if event["type"] == "metrics":
                self.metrics.append((time.monotonic(), event))
            elif event["type"] in ("playback.finished", "playback.interrupted"):
                self.played.setdefault(event.get("utterance_id") or "", asyncio.Event()).set()

    async def finished(self, utterance: str) -> None:
        """Until the utterance has played out (or was cut)."""
        await self.played.setdefault(utterance, asyncio.Event()).wait()

    def figures(self) -> dict:
        warm, end = last_before(self.metrics, self.t0 + self.warmup_s), self.metrics[-1][1]
        windows = np.arange(self.video.arrival[0], self.video.arrival[-1] - 5, 30.0)
        offsets = [av_offset(self.video, self.audio, (w, w + 30.0)) for w in windows] or [
            av_offset(self.video, self.audio)]
        misses = end["deadline_misses"] - warm["deadline_misses"]
        slots = end["frames_played"] - warm["frames_played"] + misses
        return {
            "first_frame_s": self.video.arrival[0] - self.t0,
            "misses": misses,
            "slots": slots,
            "miss_ratio": misses / max(1, slots),
            "offsets": offsets,
            "server_av_ms": max(abs(m["av_offset_ms"]) for t, m in self.metrics if t - self.t0 > self.warmup_s),
            "nbytes": (warm["engine_state_bytes"], end["engine_state_bytes"]),
            "delay_ms": end["playout_delay_ms"],
        }

    async def close(self) -> None:
        self.stop.set()
        await self.srv.http.delete(f"/v1/sessions/{self.session['session_id']}",
                                   headers={"Authorization": f"Bearer {self.session['token']}"})
        await self.pc.close()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.reader.cancel()


async def open_admitted(srv, options: dict, count: int, warmup_s: float = 15.0) -> list[SoakSession]:
    """Up to ``count`` sessions, opened as a client would: after a refusal while a worker measures
    its newest session, again once its Retry-After has passed; a refusal at capacity ends it."""
    sessions: list[SoakSession] = []
    while len(sessions) < count:
        session = SoakSession(srv, {**options, "mode": "agent" if sessions else "mirror"}, warmup_s)
        if await session.start():
            sessions.append(session)
            continue
        workers = (await srv.http.get("/v1/engine")).json()["workers"]
        settling = [w["settling_s"] for w in workers if w["settling_s"] > 0]
        if not settling:
            break
        await asyncio.sleep(max(settling) + 0.6)  # past the settle, and one more worker report
    return sessions
