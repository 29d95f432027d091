"""The session peer: our audio receive buffer in place of aiortc's (and what that saves),
and a bounded close, measured on real aiortc peers over loopback."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from fractions import Fraction

import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.rtp import RTCP_PSFB_PLI, RtcpPsfbPacket, RtpPacket
from broadcast_helpers import Clock, Releases, picture
from server_helpers import SpeechTrack, loopback_only, speech_pcm16, wait_until

from server.media.audio_jitter import AudioJitterBuffer
from server.media.broadcast import KEYFRAME_GAP_S, Broadcast, FanOut
from server.media.encoders import Media
from server.media.peer import (
    CLOSE_TIMEOUT_S,
    JITTER_ATTR,
    answer,
    answer_ingest,
    close_peer,
    create_peer,
    dead_rtcp,
    sent_codecs,
)

RATE, PACKET = 48_000, 960


class ClickMic(MediaStreamTrack):
    """Silence with a loud 20 ms packet every 10th packet, paced in real time; records when each
    loud packet was handed to the sender."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.start: float | None = None
        self.sent: list[float] = []

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        self.start = self.start or time.monotonic()
        wait = self.start + self.n * 0.02 - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        loud = self.n % 10 == 5
        pcm = np.full((1, PACKET), 12_000 if loud else 0, np.int16)
        if loud:
            self.sent.append(time.monotonic())
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = RATE, self.n * PACKET, Fraction(1, RATE)
        self.n += 1
        return frame


async def click_delay(mic_packets: int | None, clicks: int = 8) -> float:
    """Median seconds from a click handed to the client's sender to its decoded frame at the server
    (``mic_packets`` None: aiortc's own receive buffer)."""
    server, client = create_peer([]), RTCPeerConnection()
    heard: list[float] = []
    done = asyncio.Event()

    async def listen(track) -> None:
        quiet = True  # a click may spread into the next decoded frame: count where loudness begins
        while not done.is_set():
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            loud = np.abs(frame.to_ndarray()).max() > 6000
            if loud and quiet:
                heard.append(time.monotonic())
            quiet = not loud
            if len(heard) >= clicks:
                done.set()

    server.on("track", lambda track: asyncio.ensure_future(listen(track)))
    mic = ClickMic()
    client.addTrack(mic)
    await client.setLocalDescription(await client.createOffer())
    answer = await answer_ingest(server, client.localDescription, mic_packets)
    (receiver,) = [t.receiver for t in server.getTransceivers() if t.kind == "audio"]
    ours = isinstance(getattr(receiver, JITTER_ATTR), AudioJitterBuffer)
    assert ours == (mic_packets is not None) and (not ours or getattr(receiver, JITTER_ATTR).reorder == mic_packets)
    await client.setRemoteDescription(RTCSessionDescription(sdp=answer.sdp, type="answer"))
    await asyncio.wait_for(done.wait(), 30)
    await client.close()
    await close_peer(server)
    sent = mic.sent[: len(heard)]
    delays = [h - s for s, h in zip(sent, heard, strict=True)]
    assert all(d > 0 for d in delays), delays
    return statistics.median(delays)


async def test_our_receive_buffer_hands_the_microphone_over_sooner(monkeypatch) -> None:
    loopback_only(monkeypatch)
    ours = await click_delay(2)
    aiortc_default = await click_delay(None)
    # aiortc's holds each packet until 4 more have come: 80 ms; ours lets it go once it is in order.
    assert aiortc_default - ours > 0.055, (ours, aiortc_default)
    print(f"microphone packet to server: {1000 * ours:.0f} ms with ours, {1000 * aiortc_default:.0f} ms with aiortc's")


async def test_a_peer_whose_rtcp_task_died_closes_at_once(monkeypatch) -> None:
    """A client sending from a hundred SSRCs grows the server's receiver report past SRTP's buffer:
    that report task dies, and ``pc.close()`` would wait for it forever."""
    loopback_only(monkeypatch)
    server, client = create_peer([]), RTCPeerConnection()
    client.addTrack(SpeechTrack(speech_pcm16(), loop=True))
    await client.setLocalDescription(await client.createOffer())
    answer = await answer_ingest(server, client.localDescription, 1)
    await client.setRemoteDescription(RTCSessionDescription(sdp=answer.sdp, type="answer"))
    assert await wait_until(lambda: server.connectionState == "connected", 10)
    assert not dead_rtcp(server)
    dtls = client.getTransceivers()[0].sender.transport
    pt = int(next(line.split()[0].split(":")[1] for line in answer.sdp.splitlines()
                  if line.startswith("a=rtpmap:") and "opus" in line.lower()))
    for i in range(100):
        await dtls._send_rtp(RtpPacket(payload_type=pt, sequence_number=1, ssrc=0xBAD00000 + i,
                                       payload=bytes(20)).serialize())
    assert await wait_until(lambda: dead_rtcp(server), 10), "the receiver report task survived"
    t0 = time.monotonic()
    await close_peer(server)
    took = time.monotonic() - t0
    assert took < CLOSE_TIMEOUT_S / 2, took
    assert server.getTransceivers()[0].receiver.transport.state == "closed"
    await client.close()


async def viewer_offer(video: str | None = None, direction: str = "recvonly") -> RTCPeerConnection:
    """A client receiving audio and video (``direction`` of its video), preferring the ``video`` codec."""
    client = RTCPeerConnection()
    client.addTransceiver("audio", direction="recvonly")
    transceiver = client.addTransceiver("video", direction=direction)
    if video is not None:
        codecs = RTCRtpSender.getCapabilities("video").codecs
        transceiver.setCodecPreferences([c for c in codecs if c.mimeType.lower() == video])
    await client.setLocalDescription(await client.createOffer())
    return client


@pytest.mark.parametrize(("mime", "decoder"), [("video/vp8", "vp8"), ("video/h264", "h264")])
async def test_a_peer_gets_the_pictures_in_the_codec_it_negotiated(monkeypatch, mime, decoder) -> None:
    loopback_only(monkeypatch)
    video, audio = Releases("video"), Releases("audio")
    broadcast = Broadcast(video, audio, 25, 16_000)
    server, client = create_peer([]), await viewer_offer(mime)
    description = await answer(server, client.localDescription, *broadcast.subscribe())
    assert [c.mimeType.lower() for _, c in sent_codecs(server)] == ["audio/opus", mime]
    assert broadcast.video.codecs == [mime] and broadcast.audio.codecs == ["audio/opus"]
    frames: list[av.VideoFrame] = []
    decoded = asyncio.Event()
    client.on("track", lambda track: track.kind == "video" and asyncio.ensure_future(collect(track, frames, decoded)))
    await client.setRemoteDescription(RTCSessionDescription(sdp=description.sdp, type="answer"))
    pump = asyncio.create_task(broadcast.run())
    sent = {}
    deadline = time.monotonic() + 20
    while len(frames) < 10 and time.monotonic() < deadline:  # a picture per decoded one, or per 40 ms at most
        i = len(sent)
        sent[i * 3600] = picture(i)
        video.queue.put_nowait(Media(sent[i * 3600], i * 3600))
        decoded.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(decoded.wait(), 0.04)
    assert len(frames) >= 10, "the client decoded too few pictures"
    shown = frames[5]
    error = np.abs(shown.to_ndarray(format="rgb24").astype(int) - sent[shown.pts].astype(int)).mean()
    assert error < 12, error  # the picture of its own timestamp
    await client.close()
    await close_peer(server)
    video.queue.put_nowait(None)
    audio.queue.put_nowait(None)
    await asyncio.wait_for(pump, 5)


async def collect(track: MediaStreamTrack, into: list, decoded: asyncio.Event | None = None) -> None:
    with contextlib.suppress(MediaStreamError):
        while True:
            into.append(await track.recv())
            if decoded is not None:
                decoded.set()


async def test_a_receivers_keyframe_request_reaches_the_encoder() -> None:
    video, clock = Releases("video"), Clock()
    broadcast = Broadcast(video, Releases("audio"), 25, 16_000)
    broadcast.video = FanOut(video, 25, 16_000, clock)
    server, client = create_peer([]), await viewer_offer()
    track, _ = tracks = broadcast.subscribe()
    await answer(server, client.localDescription, *tracks)
    pump = asyncio.create_task(broadcast.video.run())
    (sender,) = [s for s in server.getSenders() if s.track is track]
    keyframes = []
    for i in range(6):
        if i == 3:  # what aiortc's sender does with a receiver's PLI
            await sender._handle_rtcp_packet(RtcpPsfbPacket(fmt=RTCP_PSFB_PLI, ssrc=1, media_ssrc=sender._ssrc))
        clock.now += KEYFRAME_GAP_S
        video.queue.put_nowait(Media(picture(i), i * 3600))
        keyframes.append((await asyncio.wait_for(track.recv(), 5)).is_keyframe)
    assert keyframes == [True, False, False, True, False, False]
    video.queue.put_nowait(None)
    await asyncio.wait_for(pump, 5)
    await client.close()
    await close_peer(server)


async def test_a_section_the_server_does_not_send_on_costs_no_encoding() -> None:
    broadcast = Broadcast(Releases("video"), Releases("audio"), 25, 16_000)
    server, client = create_peer([]), await viewer_offer(direction="sendonly")  # the client only sends video
    await answer(server, client.localDescription, *broadcast.subscribe())
    assert broadcast.video.codecs == [] and broadcast.audio.codecs == ["audio/opus"]
    await client.close()
    await close_peer(server)
