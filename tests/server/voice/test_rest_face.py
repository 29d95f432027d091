"""RestingVideo: frames whose audio an interrupt cut are never shown; the face fades to its rest
frame and back into the engine's frames generated after the cut."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from server.media.playout import VideoOut
from server.voice.mute import VoiceGate
from server.voice.rest_face import FADE_FRAMES, RestingVideo

SPF = 640  # 16 kHz at 25 fps


class Frames:
    """A video source: frame i is a uniform picture of value 10 + i (frame 0 is the rest face)."""

    def __init__(self, indices: list[int | None]) -> None:
        self._indices = iter(indices)
        self._slot = 0

    async def next_video(self) -> VideoOut:
        index = next(self._indices)
        self._slot += 1
        value = 0 if index is None else 10 + index
        rgb = np.full((4, 4, 3), value, np.uint8)
        return VideoOut(self._slot, index or 0, Fraction(self._slot, 25), rgb, index, False, False, 0.0)


async def shown(video: RestingVideo, n: int) -> list[tuple[int | None, int]]:
    out = []
    for _ in range(n):
        o = await video.next_video()
        assert np.all(o.rgb == o.rgb.flat[0]), "a whole picture, blended evenly"
        out.append((o.frame_index, int(o.rgb.flat[0])))
    return out


async def test_cut_frames_fade_to_rest_and_back() -> None:
    gate = VoiceGate(16_000)
    cut, fed = 20 * SPF + 100, 30 * SPF  # frame 20 holds the cut: its audio is partly dropped
    gate.mute(cut, fed)
    video = RestingVideo(Frames(list(range(40))), gate, SPF)
    out = await shown(video, 40)
    values = dict(out)
    for i in range(20):
        assert values[i] == 10 + i, "frames before the cut are the engine's own"
    for i in range(20, 30):
        assert values[i] != 10 + i, f"frame {i} holds dropped speech and was shown"
    last = 10 + 19
    assert values[20] == round(last + (10 - last) / FADE_FRAMES)  # half way to the rest face (value 10)
    assert all(values[i] == 10 for i in range(20 + FADE_FRAMES - 1, 30)), "at rest until the cut's end"
    assert 10 < values[30] < 10 + 30, "fading back in"
    assert all(values[i] == 10 + i for i in range(30 + FADE_FRAMES - 1, 40))
    assert video.replaced == 10


async def test_no_interrupt_passes_every_frame_and_repeats_through() -> None:
    gate = VoiceGate(16_000)
    indices = [None, 0, 1, 1, 2, 3]
    video = RestingVideo(Frames(indices), gate, SPF)
    out = await shown(video, len(indices))
    assert out == [(None, 0), (0, 10), (1, 11), (1, 11), (2, 12), (3, 13)]
    assert video.replaced == 0


async def test_a_range_outlives_the_audio_long_enough_for_the_video() -> None:
    """The audio side prunes ranges as it plays; the video, up to a second behind it, still
    finds them."""
    gate = VoiceGate(16_000)
    gate.mute(10 * SPF, 12 * SPF)
    gate.apply(12 * SPF + 8000, np.zeros(320, np.int16))  # audio half a second past the range
    assert gate.covers(11 * SPF, 12 * SPF)
    gate.apply(12 * SPF + 16_001, np.zeros(320, np.int16))
    assert not gate.covers(11 * SPF, 12 * SPF) and gate.ranges == []
