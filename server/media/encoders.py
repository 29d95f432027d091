"""The session's outgoing media encoded once per codec, for every peer that negotiated that codec.

aiortc's sender encodes the frames its track returns, one encoder per peer; given an ``av.Packet``
instead it only packetizes it. So a session encodes each picture and voice packet once per codec
its peers chose and hands every one of them the same packets. Video is encoded here with aiortc's
own settings (realtime, no lag, CBR) at a fixed bitrate for the picture size, with a keyframe every
:data:`KEYFRAME_INTERVAL_S` and on request; voice goes through aiortc's own encoder for the codec,
whose RTP payloads are the packets.

Two settings differ from aiortc's, measured on puppet (256²) and warped-photo (512²) pictures at
these bitrates: VP8 without its temporal denoiser (``noise-sensitivity`` 0; rendered pictures carry
no noise) costs 14% less a picture and scores 0.1 dB (256²) and 1.4 dB (512²) more PSNR; x264's
``veryfast`` preset instead of its default ``medium`` costs a third (256², 2.4 -> 0.8 ms a picture)
to a quarter (512², 12.9 -> 3.2 ms) at 0.3-0.8 dB less, so an H.264 peer costs what a VP8 one does.
x264 also takes aiortc's thread count for the picture size instead of one thread per core per encoder.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple, Protocol

import av
import numpy as np
from aiortc.codecs import get_encoder
from aiortc.codecs.vpx import number_of_threads
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

VIDEO_CLOCK = 90_000
VIDEO_TIME_BASE = Fraction(1, VIDEO_CLOCK)
# A receiver that lost a packet and whose keyframe request went unheard decodes again within this.
KEYFRAME_INTERVAL_S = 4.0
# aiortc's starting bitrate at 256², within its own bounds; larger pictures get less per pixel.
BASE_BITRATE, BASE_PIXELS = 500_000, 256 * 256
MIN_BITRATE, MAX_BITRATE = 250_000, 1_500_000
VIDEO_CODECS = {"video/vp8": "libvpx", "video/h264": "libx264"}
PAYLOAD_S = 0.020  # what each payload of aiortc's audio encoders holds


class Media(NamedTuple):
    """One picture (rgb24, pts in 1/90000) or voice packet (int16 mono, pts in samples), as released."""

    data: np.ndarray
    pts: int


class Encoder(Protocol):
    def encode(self, batch: Sequence[Media], keyframe: bool) -> list[av.Packet]:
        """The packets of ``batch`` in order (``keyframe``: its first picture as one)."""
        ...


def video_bitrate(width: int, height: int) -> int:
    """The target bitrate of a ``width`` x ``height`` stream at 25 fps."""
    return round(min(MAX_BITRATE, max(MIN_BITRATE, BASE_BITRATE * (width * height / BASE_PIXELS) ** 0.75)))


class VideoEncoder:
    """VP8 (libvpx) or H.264 (libx264, constrained baseline) of one session's pictures."""

    def __init__(self, mime: str, fps: int) -> None:
        self.codec_name = VIDEO_CODECS[mime]
        self.fps = fps
        self._codec: av.VideoCodecContext | None = None

    def encode(self, batch: Sequence[Media], keyframe: bool) -> list[av.Packet]:
        packets = []
        for i, media in enumerate(batch):
            frame = av.VideoFrame.from_ndarray(media.data, format="rgb24")
            frame.pts, frame.time_base = media.pts, VIDEO_TIME_BASE
            frame.pict_type = av.video.frame.PictureType.I if keyframe and i == 0 else av.video.frame.PictureType.NONE
            packets += self._context(frame.width, frame.height).encode(frame)
        return packets

    def _context(self, width: int, height: int) -> av.VideoCodecContext:
        if self._codec is not None and (self._codec.width, self._codec.height) == (width, height):
            return self._codec
        codec = av.CodecContext.create(self.codec_name, "w")
        codec.width, codec.height, codec.pix_fmt = width, height, "yuv420p"
        codec.time_base, codec.framerate = VIDEO_TIME_BASE, Fraction(self.fps)
        codec.bit_rate = bitrate = video_bitrate(width, height)
        codec.gop_size = round(KEYFRAME_INTERVAL_S * self.fps)
        codec.thread_count = number_of_threads(width * height, multiprocessing.cpu_count())
        if self.codec_name == "libvpx":
            codec.qmin, codec.qmax = 2, 56
            codec.options = {
                "bufsize": str(bitrate), "minrate": str(bitrate), "maxrate": str(bitrate),  # CBR, 1 s buffer
                "cpu-used": "-6", "deadline": "realtime", "lag-in-frames": "0", "noise-sensitivity": "0",
                "overshoot-pct": "15", "undershoot-pct": "100", "partitions": "0", "static-thresh": "1",
            }
        else:
            codec.profile = "Baseline"
            codec.options = {"level": "31", "tune": "zerolatency", "preset": "veryfast"}
        self._codec = codec
        return codec


class VoiceEncoder:
    """aiortc's encoder of an audio codec (Opus, G.711, G.722); each RTP payload it makes is a packet."""

    def __init__(self, codec: RTCRtpCodecParameters, sample_rate: int) -> None:
        self._encoder = get_encoder(codec)
        self._rate = sample_rate
        self._time_base = Fraction(1, codec.clockRate)
        self._step = round(PAYLOAD_S * codec.clockRate)

    def encode(self, batch: Sequence[Media], keyframe: bool = False) -> list[av.Packet]:
        packets = []
        for media in batch:
            pcm = np.ascontiguousarray(media.data, dtype=np.int16).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = self._rate, media.pts, Fraction(1, self._rate)
            payloads, timestamp = self._encoder.encode(frame)
            for i, payload in enumerate(payloads):
                packet = av.Packet(payload)
                packet.pts, packet.time_base = timestamp + i * self._step, self._time_base
                packets.append(packet)
        return packets


def encoder_for(codec: RTCRtpCodecParameters, fps: int, sample_rate: int) -> Encoder:
    """The encoder of a negotiated codec (``ValueError`` for one aiortc cannot send)."""
    mime = codec.mimeType.lower()
    if mime in VIDEO_CODECS:
        return VideoEncoder(mime, fps)
    if mime.startswith("audio/"):
        return VoiceEncoder(codec, sample_rate)
    raise ValueError(f"no encoder for {codec.mimeType}")
