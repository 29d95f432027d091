"""Enrolment reads a clip's header before it decodes a frame: a video bomb (huge frames in a tiny
file), a clip too short, too fast or without video is refused from what the container declares,
with the web process's memory left where it was; frames are read at a bounded size, and a
wall-clock bound ends an enrolment that runs too long."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from engine.personal.enroll import MAX_SIDE, EnrollError, EnrollTimeout, _frames, enroll, probe


def write_clip(path: Path, width: int, height: int, frames: int, rate: float = 25, codec: str = "libx264",
               container: str | None = None) -> Path:
    """``frames`` flat grey frames of ``width``×``height`` at ``rate``, cheap to encode whatever their size."""
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=Fraction(rate).limit_denominator(1000))
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": "ultrafast", "tune": "zerolatency", "threads": "1"}
        frame = av.VideoFrame(width, height, stream.pix_fmt)
        for plane in frame.planes:
            plane.update(bytes([90]) * plane.buffer_size)
        for i in range(frames):
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def peak_growth(run) -> int:
    """Bytes the process's peak resident memory rose by while ``run()`` ran (the peak reset first)."""
    def status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from the current size
    before = status("VmRSS")
    run()
    return status("VmHWM") - before


def test_a_video_bomb_is_refused_from_its_header_before_any_frame_is_decoded(tmp_path):
    # 6000×6000 H.264, three frames, 100 KB: a decoded frame is 54 MB, its RGB 108 MB.
    bomb = write_clip(tmp_path / "bomb.mp4", 6000, 6000, 3)
    assert bomb.stat().st_size < 300_000
    refused: list[str] = []

    def run() -> None:
        with pytest.raises(EnrollError) as err:
            enroll(bomb)
        refused.append(err.value.reason)

    grew = peak_growth(run)
    assert refused[0].startswith("too large: 6000×6000 frames"), refused
    assert grew < 30 * 2**20, f"peak memory rose {grew / 2**20:.0f} MB"


@pytest.mark.parametrize("kind, reason", [
    ("wide", "too large: 4112×16 frames"),
    ("short", "too short: 0.1 s of video"),
    ("fast", "frame rate too high: 240 fps"),
    ("audio", "not a video: the file has no video stream"),
    ("ps", "not a supported container"),
])
def test_what_the_header_declares_is_refused_in_one_line(kind, reason, tmp_path):
    path = tmp_path / f"{kind}.mp4"
    if kind == "wide":
        write_clip(path, 4112, 16, 3)
    elif kind == "short":
        write_clip(path, 64, 64, 3)
    elif kind == "fast":
        write_clip(path, 64, 64, 2600, rate=240)
    elif kind == "ps":  # MPEG-PS declares its streams only once frames are read
        write_clip(path, 64, 64, 300, codec="mpeg2video", container="mpeg")
    else:
        with av.open(str(path), "w") as out:
            stream = out.add_stream("aac", rate=16000)
            for i in range(20):
                frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
                frame.sample_rate, frame.pts = 16000, i * 1024
                for packet in stream.encode(frame):
                    out.mux(packet)
    with pytest.raises(EnrollError) as err:
        probe(path)
    assert err.value.reason.startswith(reason) and "\n" not in err.value.reason, err.value.reason
    with pytest.raises(EnrollError) as err:
        enroll(path)
    assert err.value.reason.startswith(reason)


@pytest.mark.parametrize("codec, container", [("libx264", "mp4"), ("mjpeg", "avi")])
def test_large_frames_are_read_at_a_bounded_size(codec, container, tmp_path):
    clip = write_clip(tmp_path / f"wide.{container}", 2560, 1440, 21, rate=2, codec=codec)
    header = probe(clip)
    assert (header.width, header.height, header.fps) == (2560, 1440, 2.0)
    assert 10 <= header.seconds <= 11
    shapes = {rgb.shape for _, _, rgb in _frames(clip, None)}
    assert shapes == {(MAX_SIDE * 1440 // 2560, MAX_SIDE, 3)}


def test_an_enrolment_past_its_wall_clock_bound_ends_with_a_timeout(tmp_path):
    clip = write_clip(tmp_path / "clip.mp4", 64, 64, 11, rate=1)
    with pytest.raises(EnrollTimeout) as err:
        enroll(clip, timeout_s=0.0)
    assert err.value.reason.startswith("timeout:")
