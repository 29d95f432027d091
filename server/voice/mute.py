"""Silencing the avatar's voice from an interrupt on, for audio already turned into frames.

When ``interrupt`` arrives, the engine has already been fed (and partly turned into frames)
about a second of the utterance beyond what the viewer has heard: the playout delay plus
the chunk being generated. The engine cannot take that back, so the voice is cut where the
frames leave playout instead: every audio packet whose media samples lie in a muted range
``[cut, fed)`` goes out silent (after a 5 ms fade, so the cut does not click), and the
face shows its rest pose instead of those frames (:mod:`server.voice.rest_face`) until the
silence the feed clock has fed since the interrupt reaches the screen. Speech fed after the
interrupt (``>= fed``) is never muted.

:class:`MutedAudio` wraps the playout's audio side, so the outgoing track sends what
the gate lets through and the playout itself is untouched; :mod:`server.voice.rest_face`
does the same for the pictures of those frames.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from server.media.outgoing import AudioSource
from server.media.playout import AudioOut

FADE_S = 0.005


class VoiceGate:
    """Media-sample ranges whose audio must not be heard; bounded (old ranges are pruned)."""

    def __init__(self, sample_rate: int, max_ranges: int = 32) -> None:
        self.fade = max(1, int(sample_rate * FADE_S))
        self.keep = sample_rate  # a range outlives the audio by a second: the video reads it too
        self.max_ranges = max_ranges
        self._ranges: list[tuple[int, int]] = []
        self.released_until = 0  # media sample just after the last packet released
        self.last_voiced_until: int | None = None  # media end of the last packet released with sound in it

    def mute(self, start: int, end: int) -> None:
        if end > start:
            self._ranges.append((start, end))
            del self._ranges[: max(0, len(self._ranges) - self.max_ranges)]

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(self._ranges)

    def covers(self, start: int, end: int) -> bool:
        """Whether any of media samples ``[start, end)`` is muted."""
        return any(lo < end and hi > start for lo, hi in self._ranges)

    def apply(self, media_sample: int, pcm: np.ndarray) -> np.ndarray:
        """``pcm`` (int16) for media samples ``[media_sample, +len)`` with muted ranges silenced."""
        end = media_sample + pcm.size
        self._ranges = [r for r in self._ranges if r[1] > media_sample - self.keep]
        gain: np.ndarray | None = None
        for start, stop in self._ranges:
            if start >= end:
                continue
            if gain is None:
                gain = np.ones(pcm.size, np.float32)
            t = np.arange(media_sample, end)
            ramp = np.clip((t - start) / self.fade, 0.0, 1.0)
            inside = (t >= start) & (t < stop)
            gain = np.where(inside, gain * (1.0 - ramp), gain)
        return pcm if gain is None else np.rint(pcm * gain).astype(np.int16)

    def note_released(self, media_sample: int, pcm: np.ndarray) -> None:
        self.released_until = max(self.released_until, media_sample + pcm.size)
        if np.abs(pcm).max(initial=0) > 0:
            self.last_voiced_until = media_sample + pcm.size


class MutedAudio:
    """The playout's ``next_audio`` seen through a :class:`VoiceGate` (what the audio track consumes)."""

    def __init__(self, source: AudioSource, gate: VoiceGate) -> None:
        self._source = source
        self._gate = gate

    async def next_audio(self) -> AudioOut:
        out = await self._source.next_audio()
        if out.media_sample is None:
            return out
        pcm = self._gate.apply(out.media_sample, out.pcm)
        self._gate.note_released(out.media_sample, pcm)
        return out if pcm is out.pcm else dataclasses.replace(out, pcm=pcm)
