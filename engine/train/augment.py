"""A microphone's and a room's effect on training speech, so the mouth model hears more than
clean synthesis: vocal-tract length and pitch with speed (one resampling), room reverb, noise
and a narrow band. Phone timings follow the speed change; the rest leaves them as they are."""

from __future__ import annotations

import numpy as np

from engine.media.espeak import Speech, resample
from engine.puppet.visemes import Phone

WARP = (0.88, 1.12)  # pitch and formants scale by this, duration by its inverse
REVERB_SHARE, NOISE_SHARE, BAND_SHARE = 0.3, 0.3, 0.25


def warp(speech: Speech, factor: float) -> Speech:
    """The voice played ``factor`` faster: pitch and formants up (a shorter vocal tract), timings shorter."""
    pcm = resample(speech.pcm, int(round(speech.sample_rate * factor)), speech.sample_rate)
    return Speech(pcm, [Phone(p.name, p.start / factor, p.end / factor) for p in speech.phones], speech.sample_rate)


def reverb(rng: np.random.Generator, pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """A small room: exponentially decaying noise (RT60 0.15-0.6 s) mixed with the dry sound."""
    rt60 = rng.uniform(0.15, 0.6)
    t = np.arange(int(rt60 * sample_rate)) / sample_rate
    ir = rng.standard_normal(t.size) * np.exp(-6.9 * t / rt60)
    ir[0] = 0.0
    wet = np.convolve(pcm, ir / np.sqrt(np.sum(ir**2) + 1e-9))[: pcm.size]
    mix = rng.uniform(0.15, 0.5)
    return ((1 - mix) * pcm + mix * wet).astype(np.float32)


def noise(rng: np.random.Generator, pcm: np.ndarray) -> np.ndarray:
    """White or brown-ish noise at 10-35 dB below the speech."""
    n = rng.standard_normal(pcm.size)
    if rng.random() < 0.5:
        n = np.cumsum(n)
        n -= np.convolve(n, np.ones(64) / 64, mode="same")
    power = np.mean(pcm.astype(np.float64) ** 2) + 1e-12
    snr = rng.uniform(10.0, 35.0)
    return (pcm + n * np.sqrt(power / (np.mean(n**2) + 1e-12) / 10 ** (snr / 10))).astype(np.float32)


def band(rng: np.random.Generator, pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """A phone line's or a cheap microphone's band: 200-400 Hz up to 3.4-6 kHz."""
    spec = np.fft.rfft(pcm)
    freqs = np.fft.rfftfreq(pcm.size, 1.0 / sample_rate)
    lo, hi = rng.uniform(200, 400), rng.uniform(3400, 6000)
    spec[(freqs < lo) | (freqs > hi)] = 0.0
    return np.fft.irfft(spec, pcm.size).astype(np.float32)


def perturb(rng: np.random.Generator, speech: Speech) -> Speech:
    """``speech`` with a random selection of the perturbations above."""
    out = warp(speech, rng.uniform(*WARP))
    pcm, sr = out.pcm, out.sample_rate
    if rng.random() < REVERB_SHARE:
        pcm = reverb(rng, pcm, sr)
    if rng.random() < BAND_SHARE:
        pcm = band(rng, pcm, sr)
    if rng.random() < NOISE_SHARE:
        pcm = noise(rng, pcm)
    return Speech(pcm, out.phones, sr)
