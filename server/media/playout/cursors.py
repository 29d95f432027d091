"""The playout buffer's running state, in the pieces it is read by: where each outgoing track
stands on the playout grid, what has arrived, and what was counted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from server.base.engine_port import PublishedFrame


@dataclass
class VideoCursor:
    next: int | None = None  # the next output slot to release (None: not started)
    passed: int = -1  # the last playout slot the track has passed
    media: int = 0  # engine index of the last media slot passed (what a hold shows)
    last_frame: PublishedFrame | None = None  # the frame shown last
    blank: np.ndarray | None = None  # shown until a frame has been


@dataclass
class AudioCursor:
    next: int | None = None  # the next output packet to release (None: not started)
    passed: int = -1  # the last playout packet the track has passed
    started: bool = False  # its consumer has asked for a packet


@dataclass
class Arrivals:
    top: int = -1  # the highest engine frame index received
    late_run: int = 0  # late arrivals in a row


@dataclass
class PlayoutCounts:
    """What :meth:`PlayoutBuffer.stats` reports, counted as it happens."""

    frames_in: int = 0
    shown: int = 0
    repeats: int = 0
    drops: int = 0
    skips: int = 0
    holds: int = 0
    packets: int = 0
    silent: int = 0
    audio_skipped: int = 0
    video_skipped: int = 0
    resyncs: int = 0
