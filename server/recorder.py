"""Session recording: the generated frames and their audio as an H.264/AAC MP4.

Encoding runs on its own thread behind a bounded queue, so the engine worker never waits
on x264 unless the encoder falls a whole queue behind (then it is back-pressured, not
buffered without limit). The file records media time, so it is the avatar exactly as
generated, independent of playout drops.
"""

from __future__ import annotations

import logging
import queue
import threading
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from engine.frames import PublishedFrame
from server.audio import float_to_pcm16

log = logging.getLogger(__name__)
_STOP = object()


class MP4Recorder:
    def __init__(self, path: Path, fps: int, sample_rate: int, queue_frames: int = 50) -> None:
        self.path = path
        self.fps = fps
        self.sample_rate = sample_rate
        self.frames_written = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[PublishedFrame | object] = queue.Queue(maxsize=queue_frames)
        self._thread = threading.Thread(target=self._run, name=f"recorder-{path.stem}", daemon=True)
        self._thread.start()

    def submit(self, frame: PublishedFrame, timeout_s: float = 5.0) -> None:
        """Queue a frame (blocks while the encoder is a full queue behind)."""
        if self.error is None:
            self._queue.put(frame, timeout=timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush the encoders and finish the file; safe to call twice."""
        if self._thread.is_alive():
            self._queue.put(_STOP, timeout=timeout_s)
            self._thread.join(timeout_s)

    def _run(self) -> None:
        container = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            container = av.open(str(self.path), mode="w")
            video = audio = None
            while (item := self._queue.get()) is not _STOP:
                assert isinstance(item, PublishedFrame)
                if video is None:
                    video, audio = self._open_streams(container, item)
                self._write(container, video, audio, item)
            if video is not None and audio is not None:
                container.mux(video.encode(None))
                container.mux(audio.encode(None))
        except Exception as exc:  # a broken recording must not take the session down
            self.error = exc
            log.exception("recording %s failed", self.path)
            while self._queue.get() is not _STOP:
                pass
        finally:
            if container is not None:
                container.close()

    def _open_streams(self, container: av.container.OutputContainer, first: PublishedFrame):
        h, w = first.rgb.shape[:2]
        video = container.add_stream("libx264", rate=self.fps)
        video.width, video.height = w - w % 2, h - h % 2
        video.pix_fmt = "yuv420p"
        video.time_base = Fraction(1, self.fps)
        video.options = {"preset": "veryfast", "crf": "23"}
        audio = container.add_stream("aac", rate=self.sample_rate, layout="mono")
        return video, audio

    def _write(self, container, video, audio, frame: PublishedFrame) -> None:
        rgb = frame.rgb[: video.height, : video.width]
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        vf.pts = frame.index
        vf.time_base = Fraction(1, self.fps)
        container.mux(video.encode(vf))
        pcm = float_to_pcm16(frame.audio).reshape(1, -1)
        af = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        af.sample_rate = self.sample_rate
        af.pts = frame.sample_index
        af.time_base = Fraction(1, self.sample_rate)
        container.mux(audio.encode(af))
        self.frames_written += 1
