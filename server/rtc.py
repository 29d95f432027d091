"""WebRTC side of a session: outgoing tracks fed by playout, the inbound microphone, the peer.

The outgoing tracks do no timing of their own: ``PlayoutBuffer.next_video/next_audio``
return at each slot's deadline, and the tracks only convert to ``av`` frames. RTP
timestamps come from the playout's output grid (video slot, audio sample count), so the
browser sees a steady 25 fps / 20 ms cadence even when playout repeats or drops a frame.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from server.audio import Resampler
from server.config import IceServer
from server.playout import AudioOut, PlayoutBuffer, PlayoutClosed, VideoOut

log = logging.getLogger(__name__)
VIDEO_CLOCK = 90_000


class BadOffer(ValueError):
    """The client's SDP offer cannot be used (malformed, or lacks audio/video sections)."""


class SyncProbe:
    """Measured A/V offset at release: for each track, wall time of release minus the media time
    released, median over the last ``window_s``; audio's minus video's. Playout's own figure is
    taken per audio packet against the frame on screen; this one is a windowed median as the
    tracks' senders see it. Slots playout inserts while raising its delay carry no new media time
    and are skipped.
    """

    def __init__(self, fps: int, packets_per_s: int, window_s: float = 1.0) -> None:
        self._phase = {
            "audio": deque(maxlen=max(1, round(packets_per_s * window_s))),
            "video": deque(maxlen=max(1, round(fps * window_s))),
        }

    def released(self, kind: str, media_time: float, now: float | None = None) -> None:
        self._phase[kind].append((time.monotonic() if now is None else now) - media_time)

    @property
    def offset_s(self) -> float | None:
        """Positive: audio for media time t is released after the video for t."""
        audio, video = self._phase["audio"], self._phase["video"]
        if not audio or not video:
            return None
        return statistics.median(audio) - statistics.median(video)


class PlayoutVideoTrack(MediaStreamTrack):
    kind = "video"

    def __init__(self, playout: PlayoutBuffer, fps: int, on_played: Callable[[VideoOut], None]) -> None:
        super().__init__()
        self._playout = playout
        self._ticks = VIDEO_CLOCK // fps
        self._on_played = on_played

    async def recv(self) -> av.VideoFrame:
        try:
            out = await self._playout.next_video()
        except PlayoutClosed:
            self.stop()
            raise MediaStreamError from None
        frame = av.VideoFrame.from_ndarray(out.rgb, format="rgb24")
        frame.pts = out.slot * self._ticks
        frame.time_base = Fraction(1, VIDEO_CLOCK)
        self._on_played(out)
        return frame


class PlayoutAudioTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self, playout: PlayoutBuffer, sample_rate: int, on_played: Callable[[AudioOut], None]) -> None:
        super().__init__()
        self._playout = playout
        self._rate = sample_rate
        self._on_played = on_played

    async def recv(self) -> av.AudioFrame:
        try:
            out = await self._playout.next_audio()
        except PlayoutClosed:
            self.stop()
            raise MediaStreamError from None
        pcm = np.ascontiguousarray(out.pcm, dtype=np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = out.pts
        frame.time_base = Fraction(1, self._rate)
        self._on_played(out)
        return frame


async def consume_microphone(track: MediaStreamTrack, sample_rate: int, sink: Callable[[np.ndarray], None]) -> None:
    """Read the inbound track until it ends, resampled once to the engine's rate.

    Always reading (even when the mode ignores the mic) keeps aiortc's receive queue empty.
    """
    resampler = Resampler(sample_rate)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if isinstance(frame, av.AudioFrame):
            sink(resampler.push_frame(frame))


def create_peer(ice_servers: list[IceServer]) -> RTCPeerConnection:
    servers = [RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in ice_servers]
    return RTCPeerConnection(RTCConfiguration(iceServers=servers))


async def answer(
    pc: RTCPeerConnection, offer: RTCSessionDescription, video: MediaStreamTrack, audio: MediaStreamTrack
) -> RTCSessionDescription:
    """Apply the offer, attach our two tracks to its audio/video sections, return the answer."""
    try:
        await pc.setRemoteDescription(offer)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise BadOffer(f"malformed SDP offer: {exc}") from exc
    kinds = {t.kind for t in pc.getTransceivers()}
    if not {"audio", "video"} <= kinds:
        raise BadOffer("the offer must contain an audio and a video media section")
    pc.addTrack(video)
    pc.addTrack(audio)
    await pc.setLocalDescription(await pc.createAnswer())
    return pc.localDescription


async def last_rtcp_age(pc: RTCPeerConnection) -> float | None:
    """Seconds since the peer's last RTCP receiver report on any of our senders (None: none yet)."""
    newest = None
    for sender in pc.getSenders():
        for stats in (await sender.getStats()).values():
            if stats.type == "remote-inbound-rtp":
                newest = stats.timestamp if newest is None else max(newest, stats.timestamp)
    if newest is None:
        return None
    return (datetime.now(UTC) - newest).total_seconds()


async def drain(task: asyncio.Task | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
