"""What the playout hands its consumers (one video slot, one audio packet) and reports about itself."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np


class PlayoutClosed(Exception):
    """The buffer was closed (session over): no more frames go in or come out."""


@dataclass(frozen=True)
class VideoOut:
    """What the video track shows for one output slot.

    ``slot`` counts output slots on the steady wall-clock grid (due at ``t0 + slot/fps``), so it
    suits RTP timestamps; ``media_slot``/``pts`` say which media time is on screen.
    """

    slot: int
    media_slot: int  # engine frame slot this output plays (the held one for an inserted slot)
    pts: Fraction  # media time of media_slot
    rgb: np.ndarray
    frame_index: int | None  # frame whose pixels these are; None while nothing has been shown
    repeated: bool  # not a fresh frame: the slot's frame was missing, or a hold inserted by a raise of L
    inserted: bool  # the hold was inserted by a raise of L or a resync (not a deadline miss)
    due: float


@dataclass(frozen=True)
class AudioOut:
    """One audio packet: int16 mono PCM at the configured rate.

    ``index``/``pts`` count output packets/samples on the steady grid (due at
    ``t0 + index*packet``); ``packet``/``media_sample`` say which media span is in it.
    """

    index: int
    pts: int  # index * packet_samples
    packet: int | None  # media packet counted from the first frame's audio; None for inserted silence
    media_sample: int | None  # first media sample (the engine's sample index); None for inserted silence
    pcm: np.ndarray  # (packet_samples,) int16
    sample_rate: int
    inserted: bool
    due: float


@dataclass(frozen=True)
class PlayoutStats:
    """Counters since the session started; ``deadline_misses = repeats + drops``."""

    frames_in: int
    frames_shown: int
    repeats: int  # video slots whose frame was missing at the deadline (last frame repeated)
    drops: int  # frames thrown away because their deadline had passed
    skips: int  # on-time frames skipped to shorten L
    holds: int  # video slots inserted by raising L or by a resync
    deadline_misses: int
    miss_ratio: float  # deadline_misses / (frames_shown + deadline_misses)
    delay: float  # L in effect now
    target_delay: float  # what the adaptation aims at; L is this rounded up to the quantum
    depth: int  # frames held in the buffer
    audio_packets: int
    silent_packets: int  # packets without any frame audio (missing frames or inserted silence)
    # Seconds by which audio for media time t is released after the video for t, measured on the
    # latest audio packet heard against the video slot on screen at its due time, from the
    # instants both were actually released (so a late consumer shows). 0.0 before any pair.
    av_offset: float
    audio_skipped: int = 0  # packets never released: the audio consumer was later than its tolerance
    video_skipped: int = 0  # video slots never released: the video consumer was later than its tolerance
    resyncs: int = 0  # times the media timeline was re-based because the engine fell too far behind
