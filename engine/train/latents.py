"""The DiT's training set: every clip encoded once by the trained VAE, plus its log-mel."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from engine.config import EngineConfig
from engine.modules.audio_encoder import AudioEncoder, LogMel
from engine.modules.super_resolution import pool_latents
from engine.modules.vae import VAEEncoder
from engine.train.data import TrainingClip, reference_tensor, to_tensor


@dataclass
class LatentClip:
    hr: torch.Tensor  # (L, c, H, W) normalised latents
    ref_hr: torch.Tensor  # (c, H, W) the identity's neutral reference, encoded
    mel: torch.Tensor  # (M, bins) log-mel; row 0 is mel frame ``mel_start``
    mel_start: int


@dataclass
class LatentSet:
    clips: list[LatentClip]
    lr_factor: int

    def lr(self, i: int) -> torch.Tensor:
        return pool_latents(self.clips[i].hr, self.lr_factor)


def clip_mel(audio: np.ndarray, cfg: EngineConfig, mel: LogMel, latents: int) -> tuple[torch.Tensor, int]:
    """Log-mel covering every latent's audio window (silence outside the clip)."""
    mpf = cfg.samples_per_frame // cfg.audio.hop
    window = AudioEncoder.mel_window(cfg)
    first = (1 - cfg.vae.temporal_down) * mpf - AudioEncoder.mel_before(cfg)
    last_end = first + (latents - 1) * cfg.vae.temporal_down * mpf + window
    lo, hi = mel.span(first, last_end - first)
    padded = np.zeros(hi - lo, dtype=np.float32)
    a, b = max(lo, 0), min(hi, audio.size)
    padded[a - lo:b - lo] = audio[a:b]
    return mel(torch.from_numpy(padded)), first


@torch.no_grad()
def build_latent_set(encoder: VAEEncoder, audio_encoder: AudioEncoder, clips: list[TrainingClip]) -> LatentSet:
    cfg = encoder.config
    size = cfg.vae.height
    mel = LogMel(cfg.audio)
    out = []
    for clip in tqdm(clips, desc="latents", unit="clip"):
        image = reference_tensor(clip.identity, size)
        hr = encoder(to_tensor(clip.frames(0, clip.num_frames, size))[None], image)[0][0]
        ref = encoder.encode_image(image)[0]
        m, first = clip_mel(clip.audio, cfg, mel, hr.shape[0])
        out.append(LatentClip(hr, ref, m, first))
    return LatentSet(out, cfg.dit.lr_factor)


def save_latent_set(data: LatentSet, path: Path) -> None:
    torch.save({"clips": [vars(c) for c in data.clips], "lr_factor": data.lr_factor}, path)


def load_latent_set(path: Path) -> LatentSet:
    raw = torch.load(path)
    return LatentSet([LatentClip(**c) for c in raw["clips"]], raw["lr_factor"])
