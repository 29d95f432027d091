"""The broadcast: each release encoded once per codec, the same packets for every receiver of that codec,
keyframes for receivers that join or fall behind, bounded mailboxes, and an end for everyone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from broadcast_helpers import Clock, Releases, codec, picture
from server_helpers import wait_until

import server.media.broadcast as broadcast
from server.media.broadcast import DEPTH, KEYFRAME_GAP_S, FanOut, PacketTrack
from server.media.encoders import Media

FPS, TICKS, RATE = 25, 3600, 16_000


VP8, H264, OPUS = codec("video/vp8"), codec("video/h264"), codec("audio/opus")


@pytest.fixture
def encodes(monkeypatch) -> list[tuple[str, int]]:
    """Every release each encoder was given: (codec, pts)."""
    calls: list[tuple[str, int]] = []
    real = broadcast.encoder_for

    class Counted:
        def __init__(self, codec, fps, rate) -> None:
            self.mime, self.inner = codec.mimeType.lower(), real(codec, fps, rate)

        def encode(self, batch: Sequence[Media], keyframe: bool) -> list[av.Packet]:
            calls.extend((self.mime, m.pts) for m in batch)
            return self.inner.encode(batch, keyframe)

    monkeypatch.setattr(broadcast, "encoder_for", Counted)
    return calls


@pytest.fixture
async def video() -> AsyncIterator[tuple[Releases, FanOut, Clock]]:
    source, clock = Releases("video"), Clock()
    fanout = FanOut(source, FPS, RATE, clock)
    pump = asyncio.create_task(fanout.run())
    yield source, fanout, clock
    source.queue.put_nowait(None)
    await asyncio.wait_for(pump, 5)


def receiver(fanout: FanOut, codec: RTCRtpCodecParameters) -> PacketTrack:
    track = fanout.subscribe()
    track.bind(codec)
    return track


async def take(track: PacketTrack, n: int = 1) -> list[av.Packet]:
    return [await asyncio.wait_for(track.recv(), 5) for _ in range(n)]


async def show(source: Releases, i: int, reader: PacketTrack) -> av.Packet:
    """Release picture ``i`` and wait until ``reader`` has its packet."""
    source.queue.put_nowait(Media(picture(i), i * TICKS))
    [packet] = await take(reader)
    assert packet.pts == i * TICKS
    return packet


def decoded(packets: list[av.Packet], name: str = "vp8") -> list[np.ndarray]:
    decoder = av.CodecContext.create(name, "r")
    return [f.to_ndarray(format="rgb24") for p in packets for f in decoder.decode(p)]


async def test_one_encode_feeds_every_receiver_the_same_packets(video, encodes):
    source, fanout, _ = video
    a, b = receiver(fanout, VP8), receiver(fanout, VP8)
    got_a = [await show(source, i, a) for i in range(6)]
    got_b = await take(b, 6)
    assert encodes == [("video/vp8", i * TICKS) for i in range(6)]  # once per release, not per receiver
    assert [bytes(p) for p in got_a] == [bytes(p) for p in got_b]
    assert [p.is_keyframe for p in got_a] == [True] + [False] * 5
    assert fanout.codecs == ["video/vp8"]
    for i, rgb in enumerate(decoded(got_b)):
        assert np.abs(rgb.astype(int) - picture(i).astype(int)).mean() < 12


async def test_each_codec_is_encoded_once_for_its_own_receivers(video, encodes):
    source, fanout, _ = video
    vp8, h264, h264_too = receiver(fanout, VP8), receiver(fanout, H264), receiver(fanout, H264)
    got_h264, got_h264_too = [], []
    for i in range(4):  # one at a time: a release that finds its encoder busy waits, and only the newest two do
        await show(source, i, vp8)
        got_h264 += await take(h264)
        got_h264_too += await take(h264_too)
    assert sorted(encodes) == sorted([(mime, i * TICKS) for i in range(4) for mime in ("video/vp8", "video/h264")])
    assert fanout.codecs == ["video/vp8", "video/h264"]
    assert [bytes(p) for p in got_h264] == [bytes(p) for p in got_h264_too]
    assert len(decoded(got_h264, "h264")) == 4


async def test_a_late_receiver_starts_at_a_keyframe_shared_with_the_others(video):
    source, fanout, clock = video
    first = receiver(fanout, VP8)
    for i in range(10):
        await show(source, i, first)
    late = receiver(fanout, VP8)
    clock.now += KEYFRAME_GAP_S
    shown = await show(source, 10, first)
    [joined] = await take(late)
    assert shown.is_keyframe and joined is shown
    later = [await show(source, i, first) for i in range(11, 14)]
    assert await take(late, 3) == later


async def test_keyframe_requests_are_honoured_at_most_every_gap(video):
    source, fanout, clock = video
    track = receiver(fanout, VP8)
    assert (await show(source, 0, track)).is_keyframe
    track.request_keyframe()  # PLI right after the first keyframe: too soon for another
    clock.now += KEYFRAME_GAP_S / 2
    assert not (await show(source, 1, track)).is_keyframe
    track.request_keyframe()
    clock.now += KEYFRAME_GAP_S / 2
    assert (await show(source, 2, track)).is_keyframe  # both requests, one keyframe
    clock.now += KEYFRAME_GAP_S
    assert not (await show(source, 3, track)).is_keyframe


async def test_a_keyframe_made_anyway_answers_the_requests_before_it(video):
    source, fanout, clock = video
    track = receiver(fanout, VP8)
    await show(source, 0, track)
    track.request_keyframe()  # too soon to force one
    source.queue.put_nowait(Media(picture(1, size=96), TICKS))  # a new size starts a new stream
    [resized] = await take(track)
    assert resized.is_keyframe
    clock.now += KEYFRAME_GAP_S
    source.queue.put_nowait(Media(picture(2, size=96), 2 * TICKS))
    assert not (await take(track))[0].is_keyframe


async def test_a_receiver_that_falls_behind_resumes_at_a_keyframe(video):
    source, fanout, clock = video
    reader, idle = receiver(fanout, VP8), receiver(fanout, VP8)
    clock.now += KEYFRAME_GAP_S
    seen = [await show(source, i, reader) for i in range(DEPTH["video"] + 3)]
    assert [p.is_keyframe for p in seen] == [True] + [False] * (len(seen) - 1)  # nobody asked: idle is not read
    assert idle.dropped == len(seen)  # its mailbox went at the 9th, the rest were not keyframes
    read = asyncio.ensure_future(idle.recv())  # read again: it asks for a keyframe and waits for it
    await asyncio.sleep(0)
    clock.now += KEYFRAME_GAP_S
    shown = await show(source, 20, reader)
    assert shown.is_keyframe and await asyncio.wait_for(read, 5) is shown


async def test_voice_receivers_lose_their_oldest_packets():
    source = Releases("audio")
    fanout = FanOut(source, FPS, RATE)
    pump = asyncio.create_task(fanout.run())
    reader, idle = receiver(fanout, OPUS), receiver(fanout, OPUS)
    got = []
    for i in range(DEPTH["audio"] + 6):
        source.queue.put_nowait(Media(np.full(320, 1000 * (i % 3), np.int16), i * 320))
        if i:  # the resampler holds the first release back: a packet a release from the second on
            got += await take(reader)
    source.queue.put_nowait(None)
    await asyncio.wait_for(pump, 5)
    assert set(np.diff([p.pts for p in got])) == {960}  # 20 ms at 48 kHz
    kept = [await idle.recv() for _ in range(DEPTH["audio"])]
    assert kept == got[-DEPTH["audio"]:]
    assert idle.dropped == len(got) - DEPTH["audio"]


async def test_the_end_of_the_playout_ends_every_receiver_after_its_packets(video):
    source, fanout, _ = video
    track = receiver(fanout, VP8)
    source.queue.put_nowait(Media(picture(0), 0))
    source.queue.put_nowait(None)
    [packet] = await take(track)
    assert packet.pts == 0
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(track.recv(), 5)
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(fanout.subscribe().recv(), 5)
    assert fanout.subscribers == 0 and fanout.codecs == []


async def test_the_last_receiver_of_a_codec_takes_its_encoding_along(video, encodes):
    source, fanout, _ = video
    vp8, h264 = receiver(fanout, VP8), receiver(fanout, H264)
    await show(source, 0, vp8)
    h264.stop()
    assert fanout.codecs == ["video/vp8"] and fanout.subscribers == 1
    await show(source, 1, vp8)
    assert ("video/h264", TICKS) not in encodes
    vp8.stop()
    assert fanout.codecs == [] and fanout.subscribers == 0


async def test_a_failing_encode_loses_its_release_only(video, caplog):
    source, fanout, _ = video
    track = receiver(fanout, VP8)
    await show(source, 0, track)
    for i in (1, 2):
        source.queue.put_nowait(Media(np.zeros((64, 64), np.uint8), i * TICKS))  # not rgb24: the encoder raises
        assert await wait_until(lambda i=i: track.encoding.failures == i, 5)
    after = await show(source, 3, track)
    assert after.pts == 3 * TICKS and track.encoding.failures == 2
    assert len([r for r in caplog.records if "encoding failed" in r.message]) == 1
