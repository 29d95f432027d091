"""Session recording: the generated frames and their audio as an H.264/AAC MP4.

The encoding is the engine's MP4 writer (the same file ``avatar render`` writes), handed in as a
:class:`~server.base.local_engine.Mp4Sink` maker; this wrapper runs it on its own thread behind a
bounded queue, so the engine worker never waits on x264. An encoder a whole queue behind (a slow
disk) loses the frames it cannot keep up with (counted) rather than stalling the session or
buffering without limit. The file holds media time, i.e. the avatar exactly as generated,
independent of playout drops; it appears under its name when the session ends.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

from server.base.engine_port import PublishedFrame
from server.base.local_engine import Mp4Sink

log = logging.getLogger(__name__)
_STOP = object()


class MP4Recorder:
    def __init__(self, path: Path, writer: Callable[[Path, int, int, int, int], Mp4Sink], fps: int,
                 sample_rate: int, queue_frames: int = 50) -> None:
        self.path = path
        self._writer = writer  # (path, width, height, fps, sample_rate) -> the file being written
        self.fps = fps
        self.sample_rate = sample_rate
        self.frames_written = 0
        self.frames_dropped = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[PublishedFrame | object] = queue.Queue(maxsize=queue_frames)
        self._thread = threading.Thread(target=self._run, name=f"recorder-{path.stem}", daemon=True)
        self._thread.start()

    def submit(self, frame: PublishedFrame) -> bool:
        """Queue a frame without waiting; False (and counted) when the encoder is a full queue behind."""
        if self.error is not None:
            return True
        try:
            self._queue.put_nowait(frame)
        except queue.Full:
            self.frames_dropped += 1
            return False
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush the encoders and finish the file; safe to call twice."""
        if self._thread.is_alive():
            self._queue.put(_STOP, timeout=timeout_s)
            self._thread.join(timeout_s)

    def _run(self) -> None:
        writer: Mp4Sink | None = None
        try:
            while (item := self._queue.get()) is not _STOP:
                frame = cast(PublishedFrame, item)
                if writer is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    h, w = frame.rgb.shape[:2]
                    writer = self._writer(self.path, w, h, self.fps, self.sample_rate)
                writer.write(frame)
                self.frames_written += 1
            if writer is not None:
                writer.close()
        except Exception as exc:  # a broken recording must not take the session down
            self.error = exc
            log.exception("recording %s failed", self.path)
            if writer is not None:
                writer.abort()
            while self._queue.get() is not _STOP:
                pass
