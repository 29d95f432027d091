"""A microphone's and a room's effect on training speech, so the mouth model hears more than
clean synthesis: vocal-tract length and pitch with speed (one resampling), room reverb, noise,
a narrow band and the Opus round trip a WebRTC microphone goes through. Phone timings follow the
speed change; the rest leaves them as they are."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from engine.media.espeak import Speech, resample
from engine.puppet.visemes import Phone

WARP = (0.88, 1.12)  # pitch and formants scale by this, duration by its inverse
REVERB_SHARE, NOISE_SHARE, BAND_SHARE, OPUS_SHARE = 0.3, 0.3, 0.25, 0.3
OPUS_RATE, OPUS_FRAME = 48000, 960  # as WebRTC carries a microphone: 48 kHz, 20 ms frames
OPUS_KBPS = (16.0, 64.0)  # a browser's voice bitrates


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


def opus(rng: np.random.Generator, pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """Encoded and decoded by Opus (voip, mono) at 16-64 kbit/s, the decoder's pre-skip removed so
    the audio keeps its timing and length."""
    import av

    pcm16 = (np.clip(resample(pcm, sample_rate, OPUS_RATE), -1.0, 1.0) * 32767.0).astype(np.int16)
    size = pcm16.size
    pcm16 = np.pad(pcm16, (0, -size % OPUS_FRAME))
    encoder = av.CodecContext.create("libopus", "w")
    encoder.sample_rate, encoder.layout, encoder.format = OPUS_RATE, "mono", "s16"
    encoder.bit_rate = int(rng.uniform(*OPUS_KBPS) * 1000)
    encoder.options = {"application": "voip"}
    encoder.time_base = Fraction(1, OPUS_RATE)
    decoder = av.CodecContext.create("libopus", "r")
    decoder.sample_rate, decoder.layout = OPUS_RATE, "mono"
    decoded: list[np.ndarray] = []
    for start in [*range(0, pcm16.size, OPUS_FRAME), None]:
        frame = None
        if start is not None:
            frame = av.AudioFrame.from_ndarray(pcm16[None, start:start + OPUS_FRAME], format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = OPUS_RATE, start, Fraction(1, OPUS_RATE)
        for packet in encoder.encode(frame):
            decoded += [d.to_ndarray().reshape(-1) for d in decoder.decode(packet)]
    out = np.concatenate(decoded).astype(np.float32) / 32768.0
    out = out[out.size - pcm16.size:][:size]  # the decoder's leading pre-skip off
    return resample(out, OPUS_RATE, sample_rate)[: pcm.size]


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
    if rng.random() < OPUS_SHARE:
        pcm = opus(rng, pcm, sr)
    return Speech(pcm, out.phones, sr)
