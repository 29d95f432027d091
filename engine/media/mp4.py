"""Streaming H.264 + AAC MP4 writer: frames go in as they are produced.

Writes to a hidden temporary file beside the target and renames it on success, so a
failed or interrupted render never leaves a partial output file.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from engine.frames import PublishedFrame
from engine.media.audio_io import MediaError


class Mp4Writer:
    def __init__(self, path: str | Path, width: int, height: int, fps: int, sample_rate: int,
                 crf: int = 20, preset: str = "veryfast") -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise MediaError(f"output is a directory: {self.path}")
        parent = self.path.resolve().parent
        if not parent.is_dir():
            raise MediaError(f"output folder does not exist: {parent}")
        if not os.access(parent, os.W_OK):
            raise MediaError(f"output folder is not writable: {parent}")
        self.tmp = parent / f".{self.path.name}.partial"
        try:
            self.container = av.open(str(self.tmp), mode="w", format="mp4")
        except (av.error.FFmpegError, OSError) as exc:
            raise MediaError(f"cannot write {self.path}: {exc}") from None
        self.fps = fps
        self.video = self.container.add_stream("libx264", rate=fps)
        self.video.width, self.video.height = width, height
        self.video.pix_fmt = "yuv420p"
        self.video.options = {"crf": str(crf), "preset": preset}
        self.audio = self.container.add_stream("aac", rate=sample_rate)
        self.audio.layout = "mono"
        self.sample_rate = sample_rate
        self.fifo = av.AudioFifo()
        self.samples_written = 0
        self.frames = 0
        self.closed = False

    def write(self, frame: PublishedFrame) -> None:
        vf = av.VideoFrame.from_ndarray(frame.rgb, format="rgb24")
        vf.pts = frame.index
        vf.time_base = Fraction(1, self.fps)
        self.container.mux(self.video.encode(vf))
        pcm = (np.clip(frame.audio, -1, 1) * 32767).round().astype(np.int16)[None]
        af = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        af.sample_rate = self.sample_rate
        af.pts = frame.sample_index
        af.time_base = Fraction(1, self.sample_rate)
        self.fifo.write(af)
        size = self.audio.codec_context.frame_size or 1024
        for chunk in self.fifo.read_many(size):
            self.container.mux(self.audio.encode(chunk))
        self.frames += 1

    def close(self) -> Path:
        """Flush encoders and move the finished file into place."""
        if self.closed:
            return self.path
        rest = self.fifo.read()
        if rest is not None:
            self.container.mux(self.audio.encode(rest))
        self.container.mux(self.audio.encode(None))
        self.container.mux(self.video.encode(None))
        self.container.close()
        self.closed = True
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Discard everything written so far."""
        if not self.closed:
            try:
                self.container.close()
            except av.error.FFmpegError:
                pass
            self.closed = True
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
