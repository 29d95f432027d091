"""The aiortc peer of a session: its configuration, the SDP answer, and how recently the peer was heard."""

from __future__ import annotations

from datetime import UTC, datetime

from aiortc import MediaStreamTrack, RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription

from server.config import IceServer


class BadOffer(ValueError):
    """The client's SDP offer cannot be used (malformed, or lacks audio/video sections)."""


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
