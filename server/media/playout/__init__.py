"""Playout jitter buffer: paces bursty engine frames out as one video and one audio stream.

:class:`PlayoutBuffer` (``buffer.py``) wires the pieces: the delay controller (``delay.py``),
the queue of frames by slot (``frame_queue.py``), the resync epochs (``epochs.py``) and the
A/V offset measurement (``av_offset.py``).
"""

from server.media.playout.buffer import PlayoutBuffer
from server.media.playout.config import PlayoutConfig
from server.media.playout.outputs import AudioOut, PlayoutClosed, PlayoutStats, VideoOut

__all__ = ["AudioOut", "PlayoutBuffer", "PlayoutClosed", "PlayoutConfig", "PlayoutStats", "VideoOut"]
