"""The inbound microphone: read the browser's track and resample it once to the engine's rate."""

from __future__ import annotations

from collections.abc import Callable

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from server.media.audio import Resampler


async def consume_microphone(track: MediaStreamTrack, sample_rate: int, sink: Callable[[np.ndarray], None]) -> None:
    """Read the inbound track until it ends, resampled once to the engine's rate.

    Always reading (even when the mode ignores the mic) keeps aiortc's receive queue empty.
    """
    resampler = Resampler(sample_rate)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if isinstance(frame, av.AudioFrame):
            sink(resampler.push_frame(frame))
