"""Shared pieces of the broadcast tests: a playout stand-in releasing what a test puts, a settable
clock, aiortc's codecs by name and moving test pictures."""

from __future__ import annotations

import asyncio

import numpy as np
from aiortc.codecs import CODECS
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from server.media.encoders import Media
from server.media.playout import PlayoutClosed


def codec(mime: str) -> RTCRtpCodecParameters:
    """aiortc's parameters of ``mime`` (``video/vp8``, ``audio/opus``...)."""
    return next(c for c in CODECS[mime.split("/")[0]] if c.mimeType.lower() == mime)


def picture(i: int, size: int = 64) -> np.ndarray:
    """A gradient that moves a little with ``i`` (no cut from one picture to the next)."""
    y, x = np.mgrid[0:size, 0:size]
    rgb = np.stack([(x * 4 + i * 3) % 256, (y * 4) % 256, np.full_like(x, (i * 2) % 256)], axis=-1)
    return rgb.astype(np.uint8)


class Releases:
    """A playout stand-in: releases what the test puts, ``None`` closes it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.queue: asyncio.Queue[Media | None] = asyncio.Queue()

    async def next(self) -> Media:
        media = await self.queue.get()
        if media is None:
            raise PlayoutClosed
        return media


class Clock:
    """A monotonic clock that moves when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
