"""Audio encoder: 80-bin log-mel (Whisper's filter bank) and a learned projector.

The mel uses a fixed floor instead of Whisper's per-utterance max clamp, so features
computed chunk by chunk in streaming equal those of the whole file.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers import WhisperFeatureExtractor

from engine.config import AudioConfig, EngineConfig
from engine.modules.base import Module

FLOOR_LOG10 = -8.0


def _normalise(log10_mel: torch.Tensor | float) -> torch.Tensor | float:
    return (log10_mel + 4.0) / 4.0


SILENCE_LEVEL = _normalise(FLOOR_LOG10)  # what LogMel gives for digital silence


class LogMel:
    """Log-mel frames centred at multiples of ``hop`` samples; no learned weights."""

    def __init__(self, config: AudioConfig) -> None:
        fe = WhisperFeatureExtractor(feature_size=config.mel_bins, sampling_rate=config.sample_rate,
                                     hop_length=config.hop, n_fft=config.n_fft)
        self.config = config
        self.filters = torch.from_numpy(np.asarray(fe.mel_filters, dtype=np.float32))  # (freq, mels)
        self.window = torch.hann_window(config.n_fft, periodic=True)

    def span(self, first: int, count: int) -> tuple[int, int]:
        """Sample range [start, end) needed for mel frames ``first .. first + count``."""
        half = self.config.n_fft // 2
        start = first * self.config.hop - half
        return start, start + (count - 1) * self.config.hop + self.config.n_fft

    def __call__(self, samples: torch.Tensor) -> torch.Tensor:
        """(N,) samples from :meth:`span` -> (frames, mel_bins) normalised log-mel."""
        c = self.config
        frames = samples.float().unfold(0, c.n_fft, c.hop) * self.window
        power = torch.fft.rfft(frames, dim=-1).abs().pow(2)
        mel = power @ self.filters
        log_mel = torch.log10(mel.clamp_min(1e-10)).clamp_min(FLOOR_LOG10)
        return _normalise(log_mel)


class AudioEncoder(Module):
    """Mel windows per latent frame -> ``audio_tokens`` tokens per latent frame."""

    kind = "audio_encoder"
    aligned_to_audio = True

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        a, w = config.audio, config.audio.width
        self.window_frames = self.mel_window(config)
        if self.window_frames % config.dit.audio_tokens:
            raise ValueError("mel window must divide into audio tokens")
        self.conv1 = nn.Conv1d(a.mel_bins, w, 3, padding=1)
        self.conv2 = nn.Conv1d(w, w, 3, padding=1)
        self.pos = nn.Parameter(torch.zeros(config.dit.audio_tokens, w))
        self.norm = nn.LayerNorm(w)
        self.act = nn.GELU()

    @staticmethod
    def mel_window(config: EngineConfig) -> int:
        """Mel frames per latent window: the latent's span plus context on each side."""
        per_video_frame = config.samples_per_frame // config.audio.hop
        context = config.audio.context_ms * config.audio.sample_rate // 1000 // config.audio.hop
        return per_video_frame * config.vae.temporal_down + 2 * context

    @staticmethod
    def mel_before(config: EngineConfig) -> int:
        """Mel frames of a latent's window that lie before its span (the rest of the context
        lies after it: the lookahead)."""
        a = config.audio
        context = a.context_ms * a.sample_rate // 1000 // a.hop
        ahead = context if a.lookahead_ms is None else a.lookahead_ms * a.sample_rate // 1000 // a.hop
        if not 0 <= ahead <= 2 * context:
            raise ValueError(f"lookahead_ms must lie within 0..{2 * a.context_ms}")
        return 2 * context - ahead

    @staticmethod
    def lookahead_samples(config: EngineConfig) -> int:
        """Samples a latent's window reads past the end of its own audio: the lookahead, plus the
        last mel frame's overhang (n_fft / 2 - hop). Every chunk waits for this much more audio."""
        a = config.audio
        span = config.samples_per_frame // a.hop * config.vae.temporal_down
        after = AudioEncoder.mel_window(config) - AudioEncoder.mel_before(config) - span
        return after * a.hop + a.n_fft // 2 - a.hop

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, F, window, mels) -> (B, F, audio_tokens, width)."""
        b, f, n, m = mel.shape
        x = mel.reshape(b * f, n, m).transpose(1, 2).to(self.conv1.weight.dtype)
        x = self.act(self.conv2(self.act(self.conv1(x))))
        tokens = self.config.dit.audio_tokens
        x = x.reshape(b * f, x.shape[1], tokens, n // tokens).mean(-1).transpose(1, 2)
        return self.norm(x + self.pos).reshape(b, f, tokens, -1)
