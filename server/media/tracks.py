"""Outgoing tracks fed by playout.

The tracks do no timing of their own: ``PlayoutBuffer.next_video/next_audio`` return at each
slot's deadline, and the tracks only convert to ``av`` frames. RTP timestamps come from the
playout's output grid (video slot, audio sample count), so the browser sees a steady 25 fps /
20 ms cadence even when playout repeats or drops a frame.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Protocol

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from server.media.playout import AudioOut, PlayoutClosed, VideoOut

VIDEO_CLOCK = 90_000


class VideoSource(Protocol):
    async def next_video(self) -> VideoOut: ...


class AudioSource(Protocol):
    async def next_audio(self) -> AudioOut: ...


class PlayoutVideoTrack(MediaStreamTrack):
    kind = "video"

    def __init__(self, playout: VideoSource, fps: int, on_played: Callable[[VideoOut], None]) -> None:
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

    def __init__(self, playout: AudioSource, sample_rate: int, on_played: Callable[[AudioOut], None]) -> None:
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
