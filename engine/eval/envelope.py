"""The audio's loudness envelope per video frame: the reference a lip-sync figure is read against.

It is what the mouth ground truth used to be (frame RMS in dBFS through a noise gate, opening
fast and closing a little slower). An envelope follower scores well against an envelope and
poorly against people, so ``avatar eval`` reports it beside the real mouths as the bar a
mouth model has to clear, and keeps the generated mouth's r against it as a secondary line.
"""

from __future__ import annotations

import numpy as np

from engine.puppet.mouth import frame_levels
from engine.puppet.smoother import Smoother

GATE_DB = -50.0  # frame RMS at or below which the envelope is 0: silence, breath, hum
FULL_DB = -12.0  # frame RMS at which it is 1
CURVE = 1.5
ATTACK, RELEASE = 0.85, 0.65  # per-frame smoothing towards a louder / quieter frame


def loudness_envelope(pcm: np.ndarray, sample_rate: int, fps: int = 25) -> np.ndarray:
    """(T,) float32 in [0, 1], one value per video frame of mono float audio."""
    level = frame_levels(pcm, sample_rate, fps).astype(np.float64)
    raw = np.clip((level - GATE_DB) / (FULL_DB - GATE_DB), 0.0, 1.0) ** CURVE
    return Smoother(ATTACK, RELEASE).run(raw).astype(np.float32)
