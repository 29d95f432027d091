"""PCM conversion and resampling to the engine's rate."""

from __future__ import annotations

import numpy as np

from server.media.audio import Resampler, float_to_pcm16, pcm16_to_float, resample_pcm16


def test_pcm16_round_trip_and_resampling():
    x = np.sin(np.arange(48_000) * 2 * np.pi * 440 / 48_000).astype(np.float32) * 0.5
    assert np.abs(pcm16_to_float(float_to_pcm16(x)) - x).max() < 1e-4
    y = resample_pcm16(float_to_pcm16(x), 48_000, 16_000)
    assert abs(y.size - 16_000) <= 32 and 0.45 < np.abs(y).max() < 0.55
    r = Resampler(16_000)
    parts = [r.push_pcm16(float_to_pcm16(x[i : i + 960]), 48_000) for i in range(0, 48_000, 960)]
    assert abs(sum(p.size for p in parts) + r.flush().size - 16_000) <= 32
