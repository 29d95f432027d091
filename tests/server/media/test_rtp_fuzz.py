"""Media-path fuzz: a peer that completes DTLS and then sends malformed RTP and RTCP (wrong SSRCs,
zero-length and over-long payloads, RTX with an empty payload, truncated and unknown RTCP, raw
junk) cannot crash the server or stall another session, whose frames keep arriving at 25 fps."""

from __future__ import annotations

import asyncio
import random
import re
import struct
import time
from collections.abc import Callable

import pylibsrtp
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import VideoStreamTrack
from aiortc.rtp import RtpPacket
from server_helpers import (
    Received,
    SpeechTrack,
    admitted_session,
    collect,
    connect_client,
    loopback_only,
    make_settings,
    running_server,
    session_tasks,
    speech_pcm16,
    wait_until,
)

ATTACK_S = 5.0
SRTP_MAX = 1356  # pylibsrtp's buffer (1500) less its largest trailer (144)
STRANGERS = (0xDEAD0001, 0xDEAD0002)  # SSRCs nobody announced
pytestmark = pytest.mark.usefixtures("one_thread")


async def create(srv) -> dict:
    return await admitted_session(srv, {"mode": "mirror"})


async def attacker_peer(srv, session: dict) -> RTCPeerConnection:
    """A well-behaved peer up to DTLS: it sends audio and video, so the server receives both."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(SpeechTrack(speech_pcm16(), loop=True))
    pc.addTrack(VideoStreamTrack())
    await pc.setLocalDescription(await pc.createOffer())
    res = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer",
                              json={"sdp": pc.localDescription.sdp, "type": "offer"},
                              headers={"Authorization": f"Bearer {session['token']}"})
    assert res.status_code == 200, res.text
    await pc.setRemoteDescription(RTCSessionDescription(**res.json()))
    return pc


def payload_types(sdp: str) -> dict[str, int]:
    """Codec name (lower case) -> payload type, first mapping wins."""
    types: dict[str, int] = {}
    for pt, name in re.findall(r"a=rtpmap:(\d+) ([^/\s]+)/", sdp):
        types.setdefault(name.lower(), int(pt))
    return types


def malformed(rng: random.Random, ssrcs: list[int], pts: dict[str, int]) -> list[bytes]:
    """One round of hostile RTP and RTCP (before SRTP protection)."""
    def rtp(pt: int, ssrc: int, payload: bytes) -> bytes:
        return RtpPacket(payload_type=pt, sequence_number=rng.randrange(65536), timestamp=rng.randrange(2**32),
                         ssrc=ssrc, payload=payload).serialize()

    opus, vp8, rtx = pts["opus"], pts["vp8"], pts["rtx"]
    stranger = rng.choice(STRANGERS)
    packets = [
        rtp(opus, stranger, b"\x00" * 40),  # an SSRC nobody announced
        rtp(opus, ssrcs[0], b""),  # zero-length payloads
        rtp(vp8, ssrcs[1], b""),
        rtp(rtx, ssrcs[2], b""),  # RTX with an empty payload (an old aiortc crash)
        rtp(rtx, ssrcs[2], b"\x01"),  # RTX too short for its original sequence number
        rtp(vp8, ssrcs[1], bytes(rng.randrange(256) for _ in range(SRTP_MAX - 12))),  # as long as SRTP takes
        rtp(vp8, ssrcs[1], b"\x90\xe0" + bytes(3)),  # a VP8 descriptor cut short
        rtp(111 if opus != 111 else 112, ssrcs[0], b"\x00" * 20),  # an unnegotiated payload type
    ]
    rtcp = [
        struct.pack("!BBHI", 0x80, 200, 6, ssrcs[0]),  # a sender report cut after its SSRC
        struct.pack("!BBH", 0x80, 200, 0),  # a bare header (SRTCP refuses it: it goes raw)
        struct.pack("!BBHI", 0x81, 201, 100, stranger),  # a length past the end
        struct.pack("!BBHI", 0x80, 210, 1, ssrcs[0]),  # an unknown packet type
        struct.pack("!BBHII", 0x81, 205, 3, stranger, rng.randrange(2**32)) + b"\xff" * 4,  # NACK, wrong SSRCs
        struct.pack("!BBHII", 0x81, 206, 2, ssrcs[0], stranger),  # PLI for a stranger
        struct.pack("!BBH", 0x81, 203, 1) + struct.pack("!I", stranger),  # BYE from a stranger
    ]
    return packets + rtcp


def ssrc_flood(pts: dict[str, int]) -> list[tuple[bool, bytes]]:
    """Media from a hundred unannounced SSRCs: aiortc keeps statistics for each and its receiver
    report outgrows SRTP's buffer (its RTCP task dies; ``pc.close()`` then waits for it forever)."""
    return [(True, RtpPacket(payload_type=pts["opus"], sequence_number=1, ssrc=0xBAD00000 + i,
                             payload=bytes(20)).serialize()) for i in range(100)]


def transport_killers(ssrc: int) -> list[tuple[bool, bytes]]:
    """A REMB whose FCI is cut short (struct.error in aiortc's RTCP router) and a datagram past
    SRTP's buffer (ValueError from pylibsrtp's unprotect): each ends the sender's own transport."""
    remb = struct.pack("!BBHII", 0x8F, 206, 3, ssrc, 0) + b"REMB"
    return [(True, remb), (False, b"\x80" + bytes(9000))]


async def send(pc: RTCPeerConnection, datagrams: list[tuple[bool, bytes]], sent: list[int]) -> None:
    dtls = pc.getTransceivers()[0].sender.transport
    for protect, datagram in datagrams:
        try:
            if not protect:
                raise pylibsrtp.Error("sent raw")
            await dtls._send_rtp(datagram)  # SRTP-protected, so it reaches aiortc's parsers
        except pylibsrtp.Error:  # libsrtp refuses some (an RTCP header alone): they go raw
            await dtls.transport._send(datagram)
        sent[0] += 1


async def send_until(pc: RTCPeerConnection, datagrams: list[tuple[bool, bytes]], sent: list[int],
                     done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Sends the datagrams again each second until ``done``: a server whose loop lags behind a
    flood drops datagrams from a full socket buffer, as a real attacker's are dropped and resent."""
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        await send(pc, datagrams, sent)
        if await wait_until(done, min(1.0, max(0.0, until - time.monotonic()))):
            return True
    return False


async def attack(pc: RTCPeerConnection, seconds: float, sent: list[int]) -> None:
    rng = random.Random(19)
    ssrcs = [t.sender._ssrc for t in pc.getTransceivers()[:2]]
    ssrcs.append(pc.getTransceivers()[1].sender._rtx_ssrc)
    pts = payload_types(pc.remoteDescription.sdp)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        junk = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))), b"\x80", b"\x81\xc8"]
        await send(pc, [(True, p) for p in malformed(rng, ssrcs, pts)] + [(False, j) for j in junk], sent)
        await asyncio.sleep(0.02)


def fps_between(video: Received, t0: float, t1: float) -> float:
    return sum(1 for t in video.arrival if t0 <= t < t1) / (t1 - t0)


async def test_malformed_rtp_and_rtcp_cannot_stall_another_session(monkeypatch):
    loopback_only(monkeypatch)
    # The attack's random sequence numbers on the attacker's own SSRCs trip its own SRTP replay
    # check, which ends its real senders: the attacker then sends nothing valid, and a peer timeout
    # shorter than the attack would reap it for silence before the attack is over.
    settings = make_settings(max_sessions=3, peer_timeout_s=ATTACK_S + 5.0)
    async with running_server(settings, config="puppet") as srv:
        victim_session, attacker_session = await create(srv), await create(srv)
        victim = await connect_client(srv, victim_session, None)
        video = Received("video")
        stop = asyncio.Event()
        track = next(t.receiver.track for t in victim.getTransceivers() if t.kind == "video")
        reader = asyncio.create_task(collect(track, video, stop))
        assert await wait_until(lambda: len(video.arrival) > 25, 20), "the victim never got video"

        attacker = await attacker_peer(srv, attacker_session)
        assert await wait_until(lambda: attacker.connectionState == "connected", 10)
        attacked = srv.manager.sessions[attacker_session["session_id"]]
        sent = [0]
        t0 = time.monotonic()
        await attack(attacker, ATTACK_S, sent)
        t1 = time.monotonic()
        assert sent[0] > 1000, sent
        assert attacked.pc.connectionState == "connected" and not attacked.closing  # it took all of that
        flood = ssrc_flood(payload_types(attacker.remoteDescription.sdp))
        assert await send_until(attacker, flood, sent, attacked.lifecycle.closed.is_set)
        assert attacked.close_reason == "peer_misbehaving"
        await attacker.close()

        second = await create(srv)
        attacker = await attacker_peer(srv, second)
        assert await wait_until(lambda: attacker.connectionState == "connected", 10)
        killers = transport_killers(attacker.getTransceivers()[0].sender._ssrc)
        assert await send_until(attacker, killers, sent, lambda: second["session_id"] not in srv.manager.sessions)
        t2 = time.monotonic()
        fps = fps_between(video, t0 + 0.5, t2)
        # The attack runs on the server's own event loop here (one process): a slow shared box
        # loses a few frames to it; a stall would lose most.
        assert fps >= 20.0, f"the other session dropped to {fps:.1f} fps during the attack"
        assert fps_between(video, t1, t2) >= 18.0

        health = await srv.http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert victim_session["session_id"] in srv.manager.sessions
        stop.set()
        await attacker.close()
        await victim.close()
        reader.cancel()
        await srv.http.delete(f"/v1/sessions/{victim_session['session_id']}",
                              headers={"Authorization": f"Bearer {victim_session['token']}"})
        assert await wait_until(lambda: not srv.manager.sessions and not session_tasks(), 10)
        again = await create(srv)  # the server takes new sessions
        assert again["session_id"] in srv.manager.sessions
