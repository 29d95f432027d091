"""The face goes still the moment it is interrupted: frames of dropped speech are never shown.

When ``interrupt`` arrives, the frames generated from the speech that is being dropped are
already in playout (the playout delay and the chunk in flight: a few hundred milliseconds).
:class:`~server.voice.mute.VoiceGate` silences their audio; :class:`RestingVideo` replaces
their pictures: the face fades from the last frame shown to the session's face at rest (the
first frame it showed, generated from the silence a session starts with) over ``FADE_FRAMES``
frames, stays at rest, and fades into the engine's frames again where they were generated
from the silence fed since the interrupt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from server.media.outgoing import VideoSource
from server.media.playout import VideoOut
from server.voice.mute import VoiceGate

FADE_FRAMES = 2  # 80 ms at 25 fps: the mouth is shut two frames after the cut


def blend(a: np.ndarray, b: np.ndarray, weight: float) -> np.ndarray:
    """``a`` moved ``weight`` of the way to ``b`` (uint8 RGB)."""
    if weight >= 1.0:
        return b
    mixed = a.astype(np.float32) * (1.0 - weight) + b.astype(np.float32) * weight
    return np.rint(mixed).astype(np.uint8)


class RestingVideo:
    """The playout's ``next_video`` with every frame whose audio an interrupt cut replaced."""

    def __init__(self, source: VideoSource, gate: VoiceGate, samples_per_frame: int,
                 fade_frames: int = FADE_FRAMES, on_replaced: Callable[[], None] = lambda: None) -> None:
        self._source = source
        self._on_replaced = on_replaced
        self._gate = gate
        self._spf = samples_per_frame
        self._fade = max(1, fade_frames)
        self._rest: np.ndarray | None = None
        self._shown: np.ndarray | None = None  # what went out last
        self._faded_from: np.ndarray | None = None  # the last real frame before a run of replaced ones
        self._into_rest = 0  # replaced frames in the current run
        self._out_of_rest: int | None = None  # real frames since a run of replaced ones ended
        self.replaced = 0  # frames not shown because an interrupt took their audio away

    async def next_video(self) -> VideoOut:
        out = await self._source.next_video()
        if out.frame_index is None:
            return out
        if self._rest is None:
            self._rest = out.rgb
        start = out.frame_index * self._spf
        if self._gate.covers(start, start + self._spf):
            rgb = self._resting()
        else:
            rgb = self._resuming(out.rgb)
        self._shown = rgb
        return out if rgb is out.rgb else dataclasses.replace(out, rgb=rgb)

    def _resting(self) -> np.ndarray:
        assert self._rest is not None
        if self._into_rest == 0:
            self._faded_from = self._shown if self._shown is not None else self._rest
        self._into_rest += 1
        self._out_of_rest = None
        self.replaced += 1
        self._on_replaced()
        assert self._faded_from is not None
        return blend(self._faded_from, self._rest, self._into_rest / self._fade)

    def _resuming(self, rgb: np.ndarray) -> np.ndarray:
        if self._into_rest:
            self._into_rest = 0
            self._out_of_rest = 0
        if self._out_of_rest is None:
            return rgb
        assert self._rest is not None
        self._out_of_rest += 1
        if self._out_of_rest >= self._fade:
            self._out_of_rest = None
            return rgb
        return blend(self._rest, rgb, self._out_of_rest / self._fade)
