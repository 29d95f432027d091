"""Property-based fuzzing of enrolment's reader: containers and codecs of every kind the encoders
here offer, frame sizes around and past the limits, rates and lengths, and files with header bytes
flipped or cut short. Each is either refused in one line (``EnrollError``) or read with its header
within the limits and every frame at most ``MAX_SIDE``: never another exception."""

from __future__ import annotations

import random
import time

import av
import pytest
from fuzz_budget import fuzz
from hypothesis import given, reject
from hypothesis import strategies as st
from test_enroll_probe import write_clip

from engine.personal.enroll import (
    MAX_FPS,
    MAX_INPUT_PIXELS,
    MAX_INPUT_SIDE,
    MAX_SECONDS,
    MAX_SIDE,
    MIN_SECONDS,
    EnrollError,
    _frames,
    probe,
)

FUZZ = fuzz(24)
CODECS = [("libx264", "mp4"), ("libx264", "matroska"), ("libx264", "mpegts"), ("mpeg4", "avi"), ("mjpeg", "avi"),
          ("libvpx", "webm"), ("libvpx-vp9", "webm"), ("mpeg2video", "mpeg"), ("ffv1", "matroska"),
          ("libx265", "mp4"), ("mpeg4", "mov")]
SIDES = [16, 64, 400, 1280, 1296, 4096, 4112]


@st.composite
def clips(draw: st.DrawFn) -> dict:
    return {
        "codec": draw(st.sampled_from(CODECS)),
        "size": (draw(st.sampled_from(SIDES)), draw(st.sampled_from(SIDES[:5] + [2160, 2176]))),
        "rate": draw(st.sampled_from([1, 2, 25, 121, 240])),
        "frames": draw(st.integers(1, 12)),
        "damage": draw(st.sampled_from(["none", "none", "flip", "cut"])),
        "seed": draw(st.integers(0, 2**31)),
    }


def damaged(data: bytes, how: str, seed: int) -> bytes:
    """``data`` with a few of its first 4 KiB's bytes changed, or cut at a random point."""
    rng = random.Random(seed)
    if how == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(min(len(out), 4096))] = rng.randrange(256)
        return bytes(out)
    if how == "cut":
        return data[: rng.randrange(1, len(data))]
    return data


@pytest.mark.usefixtures("one_thread")
def test_every_clip_is_read_within_bounds_or_refused_in_one_line(tmp_path):
    @FUZZ
    @given(clips())
    def read(clip: dict) -> None:
        codec, container = clip["codec"], clip["codec"][1]
        path = tmp_path / "clip.video"
        try:
            write_clip(path, *clip["size"], clip["frames"], rate=clip["rate"], codec=codec[0], container=container)
        except (av.error.FFmpegError, ValueError):
            reject()  # a combination this encoder or muxer does not take
        path.write_bytes(damaged(path.read_bytes(), clip["damage"], clip["seed"]))
        try:
            header = probe(path)
            assert max(header.width, header.height) <= MAX_INPUT_SIDE
            assert header.width * header.height <= MAX_INPUT_PIXELS
            assert header.fps is None or header.fps <= MAX_FPS
            assert header.seconds is None or MIN_SECONDS <= header.seconds <= MAX_SECONDS
            for _, _, rgb in _frames(path, None, time.monotonic() + 60):
                assert max(rgb.shape[:2]) <= MAX_SIDE and rgb.shape[2] == 3
        except EnrollError as exc:
            assert exc.reason and "\n" not in exc.reason

    read()
