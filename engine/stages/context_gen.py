"""ContextGen: a chunk's audio -> per-latent audio tokens, plus the chunk's noise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.config import EngineConfig
from engine.modules.audio_encoder import SILENCE_LEVEL, AudioEncoder, LogMel
from engine.modules.vae import latent_frames


@dataclass(frozen=True)
class AudioSpan:
    """The sample range one latent span needs (lookahead included)."""

    first_mel: int
    mel_count: int
    samples: tuple[int, int]


@dataclass(frozen=True)
class ContextRequest:
    span: tuple[int, int]  # global latent indices
    audio: np.ndarray  # samples of ``AudioSpan.samples`` for this span
    seed: int
    guided: bool = True  # the chunk may be guided (with the config's guidance): encode silence too


@dataclass(frozen=True)
class ChunkContext:
    """One row per session (B = 1 from ContextGen; ``stack`` makes a batch)."""

    span: tuple[int, int]  # the first row's; the rows of a batch share its layout
    audio_tokens: torch.Tensor  # (B, F, A, Da)
    noise: torch.Tensor  # (B, F, c, h, w) low-res latent noise
    silence_tokens: torch.Tensor | None = None  # (B, 1, A, Da): what silence sounds like, for guidance

    @staticmethod
    def stack(contexts: Sequence[ChunkContext]) -> ChunkContext:
        first = contexts[0]
        if len(contexts) == 1:
            return first
        silence = [c.silence_tokens for c in contexts]
        if any((s is None) != (silence[0] is None) for s in silence):
            raise ValueError("guided and unguided chunk contexts cannot share a batch")
        return ChunkContext(
            first.span, torch.cat([c.audio_tokens for c in contexts]), torch.cat([c.noise for c in contexts]),
            None if silence[0] is None else torch.cat(silence),
        )


class ContextGen:
    def __init__(self, config: EngineConfig, encoder: AudioEncoder) -> None:
        self.config = config
        self.encoder = encoder
        self.mel = LogMel(config.audio)
        self.mel_per_frame = config.samples_per_frame // config.audio.hop
        self.window = AudioEncoder.mel_window(config)
        self.context = AudioEncoder.mel_before(config)

    def audio_span(self, span: tuple[int, int]) -> AudioSpan:
        """Mel frames and samples needed by latents ``span``: each latent reads a fixed window
        ending ``context`` mel frames after its last video frame."""
        td = self.config.vae.temporal_down
        first_end = latent_frames(span[0], td)[1]
        first_mel = (first_end - td) * self.mel_per_frame - self.context
        count = (span[1] - span[0] - 1) * td * self.mel_per_frame + self.window
        return AudioSpan(first_mel, count, self.mel.span(first_mel, count))

    def __call__(self, req: ContextRequest) -> ChunkContext:
        span = self.audio_span(req.span)
        if req.audio.shape[0] != span.samples[1] - span.samples[0]:
            raise ValueError("audio does not match the chunk's sample span")
        mel = self.mel(torch.from_numpy(req.audio))  # (mel_count, bins)
        step = self.config.vae.temporal_down * self.mel_per_frame
        windows = mel.unfold(0, self.window, step).transpose(1, 2)  # (F, window, bins)
        guided = req.guided and self.config.audio_guidance != 1.0
        if guided:  # one more window, of the log-mel floor, in the same encoder batch
            windows = torch.cat([windows, torch.full_like(windows[:1], SILENCE_LEVEL)])
        with torch.inference_mode():
            tokens = self.encoder(windows[None].to(self.encoder.device))
        silence = None
        if guided:
            tokens, silence = tokens[:, :-1], tokens[:, -1:]
        f = req.span[1] - req.span[0]
        lh, lw = self.config.vae.latent_hw
        lr = self.config.dit.lr_factor
        gen = torch.Generator().manual_seed(req.seed)
        noise = torch.randn(1, f, self.config.vae.latent_channels, lh // lr, lw // lr, generator=gen)
        return ChunkContext(req.span, tokens, noise, silence)
