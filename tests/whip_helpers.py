"""Shared pieces of the WHIP/WHEP tests: aiortc publisher and viewer clients speaking plain WHIP/WHEP
(``application/sdp`` over HTTP), and the measure of a viewer's avatar mouth against its voice."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import ipaddress
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aioice
import numpy as np
from agent_helpers import Media, collect_media, pcm_rms
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from server_helpers import Running

from engine.avatars import avatar_image
from engine.eval.probe import measure_openness

SDP = "application/sdp"
FPS = 25


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def post_offer(srv: Running, session: dict, kind: str, pc: RTCPeerConnection, token: str | None = None):
    """POST the peer's complete offer to the session's WHIP or WHEP endpoint; the HTTP response."""
    await pc.setLocalDescription(await pc.createOffer())
    return await srv.http.post(
        f"/v1/sessions/{session['session_id']}/{kind}", content=pc.localDescription.sdp,
        headers={"Content-Type": SDP, **bearer(token or session["token"])})


@dataclass
class Peer:
    pc: RTCPeerConnection
    location: str
    media: Media


@contextlib.asynccontextmanager
async def whip_publisher(srv: Running, session: dict, track: MediaStreamTrack) -> AsyncIterator[Peer]:
    """A WHIP publisher sending ``track`` as its microphone."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver(track, direction="sendonly")
    try:
        res = await post_offer(srv, session, "whip", pc)
        assert res.status_code == 201, res.text
        await pc.setRemoteDescription(RTCSessionDescription(sdp=res.text, type="answer"))
        yield Peer(pc, res.headers["location"], Media())
    finally:
        await pc.close()


@contextlib.asynccontextmanager
async def whep_viewer(srv: Running, session: dict) -> AsyncIterator[Peer]:
    """A WHEP viewer collecting the avatar's video and voice."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    media, readers = Media(), []
    pc.on("track", lambda track: readers.append(asyncio.create_task(collect_media(track, media))))
    try:
        res = await post_offer(srv, session, "whep", pc)
        assert res.status_code == 201, res.text
        await pc.setRemoteDescription(RTCSessionDescription(sdp=res.text, type="answer"))
        yield Peer(pc, res.headers["location"], media)
    finally:
        await pc.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


# The puppet's mouth follows the phones it hears, not the voice's loudness: against loudness it reads
# r ~0.6 offline on the test speech, less over a live link's arrival jitter; a mouth that ignores the
# voice reads ~0.
MOUTH_FOLLOWS_VOICE_R = 0.35


def mouth_follows_voice(media: Media, avatar: str | None, since: float, max_lag: int = 4) -> tuple[float, int]:
    """Best Pearson r (and its lag in frames) between the mouth openness of the received video frames
    and the loudness of the received voice around each frame, over frames that arrived after ``since``.

    Frames and audio packets are put on one timeline by arrival: each video frame is paired with the
    RMS of the audio that arrived within a frame period around it.
    """
    video = [(t, rgb) for t, _, rgb in media.video if t >= since]
    frames = np.stack([rgb for _, rgb in video])
    openness = measure_openness(frames, avatar_image(avatar, frames.shape[1:3]))
    audio_t = np.array([t for t, _, _ in media.audio])
    audio_rms = np.array([pcm_rms(pcm) for _, _, pcm in media.audio])
    windows = [(audio_t >= t - 1.0 / FPS) & (audio_t < t + 1.0 / FPS) for t, _ in video]
    loudness = np.array([audio_rms[w].mean() if w.any() else 0.0 for w in windows])
    best = (-1.0, 0)
    for lag in range(-max_lag, max_lag + 1):
        a = openness[max(lag, 0) : len(openness) + min(lag, 0)]
        b = loudness[max(-lag, 0) : len(loudness) + min(-lag, 0)]
        if a.std() > 0 and b.std() > 0:
            best = max(best, (float(np.corrcoef(a, b)[0, 1]), lag))
    return best


def loopback_candidates_only(monkeypatch) -> None:
    """Keep the server's ICE checks on loopback: remote candidates at other addresses (a browser's
    interfaces) are ignored, so no check leaves 127.0.0.0/8."""
    original = aioice.Connection.add_remote_candidate

    async def add(self, candidate):
        if candidate is None or ipaddress.ip_address(candidate.host).is_loopback:
            await original(self, candidate)

    monkeypatch.setattr(aioice.Connection, "add_remote_candidate", add)


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class names it so)
        pass


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on its own loopback port (another origin than the API's)."""
    handler = functools.partial(_QuietFiles, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, name="static-site", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_port}"
        finally:
            httpd.shutdown()
            thread.join(5)
