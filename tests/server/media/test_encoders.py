"""The broadcast's encoders: packets stamped on the release grid, keyframes where asked, content that decodes back."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from broadcast_helpers import codec, picture

from server.media.encoders import (
    KEYFRAME_INTERVAL_S,
    MAX_BITRATE,
    VIDEO_TIME_BASE,
    Media,
    VideoEncoder,
    VoiceEncoder,
    encoder_for,
    video_bitrate,
)

FPS, TICKS, RATE = 25, 3600, 16_000
DECODERS = {"video/vp8": "vp8", "video/h264": "h264"}


def decode(mime: str, packets: list[av.Packet]) -> list[np.ndarray]:
    decoder = av.CodecContext.create(DECODERS[mime], "r")
    return [f.to_ndarray(format="rgb24") for p in packets for f in decoder.decode(p)]


@pytest.mark.parametrize("mime", ["video/vp8", "video/h264"])
def test_pictures_decode_back_with_their_timestamps(mime):
    encoder = VideoEncoder(mime, FPS)
    packets = []
    for i in range(10):
        packets += encoder.encode([Media(picture(i), (100 + i) * TICKS)], keyframe=False)
    assert [p.pts for p in packets] == [(100 + i) * TICKS for i in range(10)]
    assert all(p.time_base == VIDEO_TIME_BASE for p in packets)
    assert [p.is_keyframe for p in packets] == [True] + [False] * 9
    decoded = decode(mime, packets)
    assert len(decoded) == 10
    for i, rgb in enumerate(decoded):
        error = np.abs(rgb.astype(int) - picture(i).astype(int))
        assert error.mean() < 12, (i, error.mean())


@pytest.mark.parametrize("mime", ["video/vp8", "video/h264"])
def test_keyframes_on_request_and_every_interval(mime):
    encoder = VideoEncoder(mime, FPS)
    interval = round(KEYFRAME_INTERVAL_S * FPS)
    keyframes = []
    for i in range(2 * interval):
        [packet] = encoder.encode([Media(picture(i), i * TICKS)], keyframe=i == 7)
        if packet.is_keyframe:
            keyframes.append(i)
    assert keyframes[:2] == [0, 7]
    assert max(np.diff([*keyframes, 2 * interval])) <= interval  # unasked too (x264 also at what it takes for cuts)


def test_a_batch_keyframes_its_first_picture_only():
    encoder = VideoEncoder("video/vp8", FPS)
    encoder.encode([Media(picture(0), 0)], keyframe=False)
    batch = [Media(picture(i), i * TICKS) for i in (1, 2)]
    packets = encoder.encode(batch, keyframe=True)
    assert [(p.pts, p.is_keyframe) for p in packets] == [(TICKS, True), (2 * TICKS, False)]


def test_a_new_picture_size_starts_a_new_stream():
    encoder = VideoEncoder("video/vp8", FPS)
    small = encoder.encode([Media(picture(0, 64), 0), Media(picture(1, 64), TICKS)], keyframe=False)
    large = encoder.encode([Media(picture(2, 128), 2 * TICKS)], keyframe=False)
    assert [p.is_keyframe for p in small + large] == [True, False, True]
    assert decode("video/vp8", large)[0].shape == (128, 128, 3)


def test_bitrate_grows_slower_than_the_picture():
    assert video_bitrate(256, 256) == 500_000
    assert 500_000 < video_bitrate(512, 512) < 4 * 500_000
    assert video_bitrate(512, 512) == round(500_000 * 4**0.75)
    assert video_bitrate(1920, 1080) == MAX_BITRATE


def tone(n: int, hz: float = 440.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(n) / rate
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def test_voice_is_opus_on_a_48k_grid_and_decodes_to_the_tone():
    encoder = VoiceEncoder(codec("audio/opus"), RATE)
    pcm = tone(RATE)  # one second
    packets = []
    for i in range(50):
        packets += encoder.encode([Media(pcm[i * 320:(i + 1) * 320], 5000 + i * 320)])
    assert 48 <= len(packets) <= 50
    steps = np.diff([p.pts for p in packets])
    assert set(steps) == {960}
    assert all(p.time_base == Fraction(1, 48_000) for p in packets)
    decoder = av.CodecContext.create("libopus", "r")
    decoded = np.concatenate([f.to_ndarray().reshape(-1, f.layout.nb_channels)[:, 0]
                              for p in packets for f in decoder.decode(p)])
    spectrum = np.abs(np.fft.rfft(decoded[4800:].astype(float)))
    peak_hz = np.argmax(spectrum) * 48_000 / (decoded.size - 4800)
    assert abs(peak_hz - 440) < 5


def test_g711_voice_is_one_payload_per_packet():
    encoder = encoder_for(codec("audio/pcmu"), FPS, RATE)
    packets = encoder.encode([Media(tone(320), i * 320) for i in range(5)], keyframe=False)
    assert len(packets) >= 4  # the resampler may hold back the first packet
    assert {len(bytes(p)) for p in packets} == {160}  # 20 ms at 8 kHz, a byte a sample
    assert set(np.diff([p.pts for p in packets])) == {160}


def test_codecs_aiortc_cannot_send_are_refused():
    with pytest.raises(ValueError):
        encoder_for(RTCRtpCodecParameters(mimeType="video/AV1", clockRate=90_000, payloadType=45), FPS, RATE)
