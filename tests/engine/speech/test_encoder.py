"""Whisper's log-mel and the packaged encoder: the filters tile the spectrum on the mel scale, a
tone lands in its band, and the encoder reads 20 ms per position, the same audio the same way."""

from __future__ import annotations

import numpy as np
import torch

from engine.speech.encoder import HOP, N_MELS, SAMPLE_RATE, load_encoder, log_mel, mel_filters


def test_mel_filters_are_triangles_climbing_the_spectrum() -> None:
    f = mel_filters().numpy()
    assert f.shape == (N_MELS, 201) and f.min() >= 0.0
    peaks = f.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > 190
    assert (np.diff(peaks[:10]) <= 2).all() and (np.diff(peaks[-10:]) >= 4).all()  # narrow low, wide high


def test_a_tone_lands_in_its_band_and_levels_are_clamped() -> None:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    mel = log_mel(0.3 * np.sin(2 * np.pi * 1000.0 * t)).numpy()
    assert mel.shape == (N_MELS, SAMPLE_RATE // HOP)
    band = mel[:, 20:80].mean(axis=1).argmax()
    centre = np.argmax(mel_filters().numpy()[band]) * SAMPLE_RATE / 400
    assert abs(centre - 1000.0) < 80.0
    assert mel.max() - mel.min() <= 2.0 + 1e-6  # 8 log10 units below the loudest, scaled by 1/4


def test_the_encoder_reads_one_position_per_20_ms_and_is_deterministic() -> None:
    encoder = load_encoder()
    rng = np.random.default_rng(1)
    pcm = (0.05 * rng.standard_normal(2 * SAMPLE_RATE)).astype(np.float32)
    with torch.no_grad():
        a, b = encoder(log_mel(pcm)), encoder(log_mel(pcm))
    assert a.shape == (100, encoder.width) == (100, 384)
    assert torch.equal(a, b) and torch.isfinite(a).all()
    assert load_encoder() is encoder  # loaded once per process


def test_asking_for_some_positions_gives_exactly_theirs() -> None:
    """The last block works on the rows asked for alone; they attend to every position as before."""
    encoder = load_encoder()
    pcm = (0.05 * np.random.default_rng(2).standard_normal(SAMPLE_RATE)).astype(np.float32)
    with torch.no_grad():
        mel = log_mel(pcm)
        whole, some = encoder(mel), encoder(mel, slice(30, 38))
    assert some.shape == (8, encoder.width)
    torch.testing.assert_close(some, whole[30:38], rtol=0, atol=1e-6)
