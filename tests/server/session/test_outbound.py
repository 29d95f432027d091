"""The video-out pipeline alone: frames from a fake engine in, encoded pictures and voice out of its
broadcast, in order, and what the voice gate cuts (an interrupt's range) muted and at rest."""

from __future__ import annotations

import asyncio
import contextlib

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError

from engine.frames import PublishedFrame
from server.base.metrics import ServerMetrics
from server.base.protocol import SessionCreate
from server.session.inbound import Inbound
from server.session.liveness import Liveness
from server.session.outbound import Outbound
from server.session.trace import LatencyTrace
from tests.broadcast_helpers import codec
from tests.pipeline_helpers import FPS, RATE, FakeEngine
from tests.server_helpers import make_settings, wait_until

SIZE = 64
FRAMES = 40


def frame(i: int) -> PublishedFrame:
    """Frame ``i``: a flat grey whose level tells its index, and a tone over its 40 ms."""
    rgb = np.full((SIZE, SIZE, 3), 30 + 5 * i, np.uint8)
    t = (i * RATE // FPS + np.arange(RATE // FPS)) / RATE
    return PublishedFrame(i, FPS, rgb, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), RATE, i // 4)


def pipeline() -> tuple[Outbound, Inbound, FakeEngine]:
    engine, metrics = FakeEngine(), ServerMetrics()
    settings = make_settings()
    inbound = Inbound("s", SessionCreate(mode="agent"), settings, engine, lambda: 0, metrics, lambda e: None,
                      lambda s: None, lambda t, start, s: None)
    connected = asyncio.Event()
    connected.set()
    outbound = Outbound("s", settings, engine, inbound.voice, connected, Liveness(), LatencyTrace(), metrics,
                        lambda e: None, lambda: None, None)
    return outbound, inbound, engine


async def packets_of(track, count: int) -> list[av.Packet]:
    got = []
    with contextlib.suppress(MediaStreamError):
        while len(got) < count:
            got.append(await asyncio.wait_for(track.recv(), 10.0))  # ends with the track
    return got


def receiving(outbound: Outbound) -> tuple[object, object, asyncio.Task]:
    """One receiver's VP8 video and Opus voice tracks, and the broadcast's pump."""
    video, audio = outbound.broadcast.subscribe()
    video.bind(codec("video/vp8"))
    audio.bind(codec("audio/opus"))
    return video, audio, asyncio.create_task(outbound.broadcast.run())


def levels(packets: list[av.Packet]) -> list[float]:
    decoder = av.CodecContext.create("vp8", "r")
    return [float(f.to_ndarray(format="rgb24").mean()) for p in packets for f in decoder.decode(p)]


def voice(packets: list[av.Packet]) -> np.ndarray:
    """The decoded voice, float in [-1, 1]."""
    decoder = av.CodecContext.create("opus", "r")
    return np.concatenate([f.to_ndarray().reshape(-1) for p in packets for f in decoder.decode(p)]).astype(float)


async def test_frames_in_come_out_encoded_in_order_and_paced_with_their_voice() -> None:
    outbound, _, engine = pipeline()
    video, audio, pump = receiving(outbound)
    await outbound.generated.put([frame(i) for i in range(FRAMES)])
    reading = [asyncio.create_task(packets_of(track, 10 ** 6)) for track in (video, audio)]
    assert await wait_until(lambda: outbound.playout.stats().frames_shown >= FRAMES, 10.0)
    outbound.playout.close()  # the receivers end after the packets of what was released
    await asyncio.wait_for(pump, 10.0)
    video_packets, audio_packets = await asyncio.gather(*reading)

    assert outbound.generated.frames == FRAMES
    assert engine.origins and isinstance(engine.origins[-1], float), "the engine was told playout's clock"
    shown = [round((level - 30) / 5) for level in levels(video_packets)]
    assert shown == sorted(shown), f"pictures out of order: {shown}"
    assert len(set(shown)) >= FRAMES * 3 // 4 and shown[-1] == FRAMES - 1  # playout may skip a few to catch up
    pts = [p.pts for p in video_packets]
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False)), "video timestamps advance"
    assert np.sqrt(np.mean(voice(audio_packets) ** 2)) > 0.05, "the frames' voice is heard"


async def test_a_cut_range_is_muted_and_its_frames_fade_to_the_rest_face() -> None:
    outbound, inbound, _ = pipeline()
    video, audio, pump = receiving(outbound)
    await outbound.generated.put([frame(i) for i in range(8)])
    first = await packets_of(video, 8)
    await packets_of(audio, 16)
    spf = RATE // FPS
    inbound.voice.gate.mute(8 * spf, FRAMES * spf)  # what an interrupt does to speech fed and not yet heard
    await outbound.generated.put([frame(i) for i in range(8, FRAMES)])
    try:
        later_video = await packets_of(video, FRAMES - 8)
        later_audio = await packets_of(audio, (FRAMES - 8) * 2)
    finally:
        outbound.playout.close()
        await asyncio.wait_for(pump, 10.0)

    last = levels(first + later_video)[-5:]
    assert max(last) < 30 + 5 * 20, f"the face rests instead of showing the dropped speech: {last}"
    assert np.abs(voice(later_audio[-10:])).max() < 0.01, "the voice is muted from the cut"
