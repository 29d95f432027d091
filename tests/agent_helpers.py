"""Shared pieces of the agent tests: a live agent-mode session seen by an aiortc client, with its
control events (arrival times kept) and the received audio and video."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import av
import numpy as np
import websockets
from aiortc import MediaStreamTrack, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError
from server_helpers import Running, connect_client, speech_pcm16, wait_until

PACKET_S = 0.02
LEAD_S = 3.0  # silence on the microphone before the user speaks


def user_wav(rate: int = 16000) -> tuple[np.ndarray, float]:
    """Silence, then a sentence of real speech, then silence (int16); and the speech's length."""
    speech = speech_pcm16(rate)
    return np.concatenate([np.zeros(int(LEAD_S * rate), np.int16), speech, np.zeros(2 * rate, np.int16)]), (
        speech.size / rate
    )


class Events:
    """Everything the control socket says, with arrival times."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.items: list[tuple[float, dict]] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.ws:
                self.items.append((time.monotonic(), json.loads(raw)))

    async def send(self, message: dict | bytes) -> None:
        await self.ws.send(message if isinstance(message, bytes) else json.dumps(message))

    def of(self, kind: str, utterance_id: str | None = None) -> list[dict]:
        return [e for _, e in self.items if e["type"] == kind
                and (utterance_id is None or e.get("utterance_id") == utterance_id)]

    def at(self, kind: str, utterance_id: str | None = None) -> float:
        """Arrival time of the first such event."""
        return next(t for t, e in self.items if e["type"] == kind
                    and (utterance_id is None or e.get("utterance_id") == utterance_id))

    async def wait(self, kind: str, utterance_id: str | None = None, timeout_s: float = 20.0, after: int = 0) -> dict:
        """The first such event, waiting for it; ``after`` skips that many earlier ones."""
        ok = await wait_until(lambda: len(self.of(kind, utterance_id)) > after, timeout_s, 0.01)
        assert ok, f"no {kind} {utterance_id or ''} within {timeout_s} s: {self.summary()}"
        return self.of(kind, utterance_id)[after]

    def has(self, kind: str, utterance_id: str) -> bool:
        return bool(self.of(kind, utterance_id))

    def index(self, kind: str, utterance_id: str) -> int:
        """Position of the first such event among everything said."""
        for i, (_, e) in enumerate(self.items):
            if e["type"] == kind and e.get("utterance_id") == utterance_id:
                return i
        raise AssertionError(f"no {kind} for {utterance_id}: {self.summary()}")

    def summary(self) -> list[dict]:
        return [{k: v for k, v in e.items() if k != "audio"} for _, e in self.items if e["type"] != "metrics"]


@dataclass
class Media:
    """Received frames: video as (arrival, pts, rgb), audio as (arrival, pts, mono int16 at 48 kHz)."""

    video: list[tuple[float, int, np.ndarray]] = field(default_factory=list)
    audio: list[tuple[float, int, np.ndarray]] = field(default_factory=list)

    def loud_packets(self, since: float = 0.0, threshold: float = 0.05) -> int:
        """20 ms packets received after ``since`` whose RMS is above ``threshold`` (of full scale)."""
        return sum(1 for t, _, pcm in self.audio if t >= since and pcm_rms(pcm) > threshold)

    def tone_seconds(self, rate: int = 48_000) -> float:
        """Seconds of a steady tone heard, from the received energy, so partial packets count in part.

        The reference level is the median RMS of the loud packets (the send path's stereo upmix
        changes the level by a fixed factor).
        """
        loud = [pcm_rms(pcm) for _, _, pcm in self.audio if pcm_rms(pcm) > 0.05]
        if not loud:
            return 0.0
        energy = sum(float(np.sum((pcm.astype(np.float64) / 32768.0) ** 2)) for _, _, pcm in self.audio)
        return energy / float(np.median(loud)) ** 2 / rate


def pcm_rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pcm.astype(np.float64) / 32768.0) ** 2))) if pcm.size else 0.0


async def collect_media(track: MediaStreamTrack, media: Media) -> None:
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        now = time.monotonic()
        if isinstance(frame, av.VideoFrame):
            media.video.append((now, frame.pts, frame.to_ndarray(format="rgb24")))
        else:
            pcm = frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0].copy()
            media.audio.append((now, frame.pts, pcm))


@dataclass
class Live:
    session: dict
    events: Events
    media: Media
    pc: RTCPeerConnection

    @property
    def id(self) -> str:
        return self.session["session_id"]


@contextlib.asynccontextmanager
async def live_session(srv: Running, mic: MediaStreamTrack | None = None, **create) -> AsyncIterator[Live]:
    """An agent session with its control socket and an aiortc viewer, torn down at the end."""
    res = await srv.http.post("/v1/sessions", json={"mode": "agent", **create})
    assert res.status_code == 201, res.text
    session = res.json()
    ws = await websockets.connect(
        f"{srv.ws_url}/v1/sessions/{session['session_id']}/control?token={session['token']}", max_size=2**24
    )
    events = Events(ws)
    pc = await connect_client(srv, session, mic)
    media = Media()
    readers = [asyncio.create_task(collect_media(r.track, media)) for r in pc.getReceivers() if r.track is not None]
    try:
        await events.wait("session.ready", timeout_s=30)
        yield Live(session, events, media, pc)
    finally:
        await srv.http.delete(f"/v1/sessions/{session['session_id']}",
                              headers={"Authorization": f"Bearer {session['token']}"})
        await ws.close()
        await pc.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(events.task, *readers, return_exceptions=True)


def tone(seconds: float, rate: int = 16000, hz: float = 300.0, amplitude: float = 0.5) -> np.ndarray:
    """A steady tone as int16: loud in every 20 ms packet, so what is heard can be counted."""
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * amplitude * 32767).astype("<i2")


def append_message(pcm: np.ndarray, rate: int, utterance_id: str | None = None) -> dict:
    message = {"type": "audio.append", "sample_rate": rate, "audio": base64.b64encode(pcm.tobytes()).decode()}
    if utterance_id is not None:
        message["utterance_id"] = utterance_id
    return message
