"""The session's outgoing pictures and voice, as the playout releases them.

The sources do no timing of their own: ``PlayoutBuffer.next_video/next_audio`` return at each
slot's deadline, and the sources only stamp what they return. Timestamps come from the playout's
output grid (video slot, audio sample count), so the browser sees a steady 25 fps / 20 ms cadence
even when playout repeats or drops a frame. Nothing is converted here: the broadcast's encoders
turn the arrays into frames off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from server.media.encoders import VIDEO_CLOCK, Media
from server.media.playout import AudioOut, VideoOut


class VideoSource(Protocol):
    async def next_video(self) -> VideoOut: ...


class AudioSource(Protocol):
    async def next_audio(self) -> AudioOut: ...


class MediaSource(Protocol):
    """What a broadcast pumps: each release in turn (``PlayoutClosed`` once the playout closed)."""

    kind: str

    async def next(self) -> Media: ...


class PlayoutVideo:
    """Pictures at their slots' deadlines; pts in 1/90000 on the slot grid."""

    kind = "video"

    def __init__(self, playout: VideoSource, fps: int, on_played: Callable[[VideoOut], None]) -> None:
        self._playout = playout
        self._ticks = VIDEO_CLOCK // fps
        self._on_played = on_played

    async def next(self) -> Media:
        out = await self._playout.next_video()
        self._on_played(out)
        return Media(out.rgb, out.slot * self._ticks)


class PlayoutAudio:
    """Voice packets (int16 mono) at their deadlines; pts in samples."""

    kind = "audio"

    def __init__(self, playout: AudioSource, on_played: Callable[[AudioOut], None]) -> None:
        self._playout = playout
        self._on_played = on_played

    async def next(self) -> Media:
        out = await self._playout.next_audio()
        self._on_played(out)
        return Media(out.pcm, out.pts)
