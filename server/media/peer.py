"""The aiortc peer of a session: its configuration, the SDP answer, and how recently the peer was heard."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.sdp import SessionDescription

from server.base.protocol import IceServer
from server.media.audio_jitter import AudioJitterBuffer
from server.media.broadcast import PacketTrack
from server.media.sdp import BadOffer, check_offer

__all__ = ["BadOffer", "answer", "answer_ingest", "apply_offer", "close_peer", "create_peer", "dead_rtcp",
           "hold_audio_packets", "last_rtcp_age", "remote_streams", "sent_codecs"]
log = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 5.0  # a healthy close takes milliseconds
JITTER_ATTR = "_RTCRtpReceiver__jitter_buffer"  # aiortc's receiver keeps its jitter buffer here
RTCP_TASK_ATTR = "_RTCRtpReceiver__rtcp_task"  # and its receiver-report task here
# aiortc's sender turns a receiver's PLI/FIR into this call, which forces a keyframe only of frames it
# encodes itself; the broadcast's tracks hand it packets, so the request goes to their encoding instead.
KEYFRAME_HOOK = "_send_keyframe"
SENDING = ("sendrecv", "sendonly")


def create_peer(ice_servers: list[IceServer]) -> RTCPeerConnection:
    servers = [RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in ice_servers]
    return RTCPeerConnection(RTCConfiguration(iceServers=servers))


async def apply_offer(pc: RTCPeerConnection, offer: RTCSessionDescription, mic_packets: int | None = None) -> set[str]:
    """Apply the client's offer (checked first: :func:`check_offer`); the kinds of its media sections.
    ``mic_packets``: how many later audio packets a missing one is waited for (:func:`hold_audio_packets`)."""
    check_offer(offer.sdp)
    try:
        await pc.setRemoteDescription(offer)
    except Exception as exc:  # aiortc's parser raises anything from StopIteration to OperationError
        raise BadOffer(f"malformed SDP offer: {exc.__class__.__name__}: {exc}") from exc
    if mic_packets is not None:
        hold_audio_packets(pc, mic_packets)
    return {t.kind for t in pc.getTransceivers()}


def hold_audio_packets(pc: RTCPeerConnection, packets: int) -> None:
    """Give each audio receiver our :class:`AudioJitterBuffer`: a packet leaves as soon as it is in
    order, a missing one is waited for until ``packets`` later ones are in (aiortc's own buffer holds
    every packet until 4 more have come: 80 ms, and stays 280 ms behind after one loss)."""
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind != "audio" or not hasattr(receiver, JITTER_ATTR):
            continue
        old = getattr(receiver, JITTER_ATTR)
        setattr(receiver, JITTER_ATTR, AudioJitterBuffer(capacity=old.capacity, reorder=packets))


async def _local_answer(pc: RTCPeerConnection) -> RTCSessionDescription:
    try:
        await pc.setLocalDescription(await pc.createAnswer())
    except Exception as exc:  # an offer aiortc applied but cannot answer
        raise BadOffer(f"cannot answer this offer: {exc.__class__.__name__}: {exc}") from exc
    return pc.localDescription


async def answer(
    pc: RTCPeerConnection, offer: RTCSessionDescription, video: PacketTrack, audio: PacketTrack,
    mic_packets: int | None = None,
) -> RTCSessionDescription:
    """Apply the offer, attach our two tracks to its audio/video sections, return the answer; each
    track then receives the packets of the codec its section negotiated, and its receiver's keyframe
    requests reach that codec's encoder."""
    if not {"audio", "video"} <= await apply_offer(pc, offer, mic_packets):
        raise BadOffer("the offer must contain an audio and a video media section")
    pc.addTrack(video)
    pc.addTrack(audio)
    description = await _local_answer(pc)
    for sender, codec in sent_codecs(pc):
        if isinstance(sender.track, PacketTrack):
            setattr(sender, KEYFRAME_HOOK, sender.track.request_keyframe)
            sender.track.bind(codec)
    return description


def sent_codecs(pc: RTCPeerConnection) -> list[tuple[RTCRtpSender, RTCRtpCodecParameters]]:
    """Each sender with a track that sends, and its codec: the first of its section in our answer."""
    sections = SessionDescription.parse(pc.localDescription.sdp).media
    first = {m.rtp.muxId: m.rtp.codecs[0] for m in sections if m.rtp.codecs}
    return [(t.sender, first[t.mid]) for t in pc.getTransceivers()
            if t.sender.track is not None and t.mid in first and t.currentDirection in SENDING]


async def answer_ingest(pc: RTCPeerConnection, offer: RTCSessionDescription,
                        mic_packets: int | None = None) -> RTCSessionDescription:
    """A publisher's offer (WHIP): its audio comes in, nothing goes back; any video is read and ignored."""
    if "audio" not in await apply_offer(pc, offer, mic_packets):
        raise BadOffer("a WHIP offer must contain an audio media section")
    return await _local_answer(pc)


async def close_peer(pc: RTCPeerConnection, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """``pc.close()``, bounded, and the peer's sockets freed whatever happens.

    aiortc's close raises when a transceiver has no transport (an offer that failed half applied),
    and never returns when a receiver's RTCP task has died: a peer that sends from enough unannounced
    SSRCs grows the receiver report past SRTP's buffer, and close then waits on that task forever.
    The session must close (and free its slot) either way: when a report task is known dead, at once.
    """
    if dead_rtcp(pc):
        log.warning("a receiver's RTCP task has died; stopping the peer connection's parts one by one")
    else:
        try:
            await asyncio.wait_for(pc.close(), timeout_s)
            return
        except Exception as exc:
            log.warning("closing a peer connection failed (%s: %s); stopping its parts one by one",
                        exc.__class__.__name__, exc)
    for transceiver in pc.getTransceivers():
        with contextlib.suppress(Exception):
            await asyncio.wait_for(transceiver.sender.stop(), 1.0)
        with contextlib.suppress(Exception):  # its decoder thread (not a daemon) would outlive the process
            transceiver.receiver._handle_disconnect()
        dtls = transceiver.receiver.transport
        if dtls is not None:
            with contextlib.suppress(Exception):
                await dtls.stop()
                await dtls.transport.stop()


def dead_rtcp(pc: RTCPeerConnection) -> bool:
    """Whether a receiver's RTCP task ended with an error (``pc.close()`` would then never return)."""
    for receiver in pc.getReceivers():
        task = getattr(receiver, RTCP_TASK_ATTR, None)
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            return True
    return False


def remote_streams(pc: RTCPeerConnection) -> int:
    """How many SSRCs the peer sent media from in the last 10 s (a browser: one per track, two with RTX)."""
    return sum(len(receiver.getSynchronizationSources()) for receiver in pc.getReceivers())


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
