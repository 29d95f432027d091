"""Autoencoder training: short causal clips of rendered faces, L1 + MSE reconstruction
from latents with a little noise added (so the decoder tolerates generated latents), a
small penalty keeping latents bounded, then per-channel latent statistics so the DiT
sees ~N(0, 1) latents."""

from __future__ import annotations

import math

import numpy as np
import torch
from tqdm import tqdm

from engine.modules.vae import VAEDecoder, VAEEncoder
from engine.photo.crops import CROP
from engine.train.data import TrainingClip, mouth_weight, reference_tensor, to_tensor


def random_window(clips: list[TrainingClip], rng: np.random.Generator, latents: int, size: int,
                  temporal_down: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random run of ``1 + (latents - 1) * T`` rendered frames from a random clip, and
    that clip's reference image."""
    n = 1 + (latents - 1) * temporal_down
    clip = clips[int(rng.integers(len(clips)))]
    lo = int(rng.integers(0, clip.num_frames - n + 1))
    return to_tensor(clip.frames(lo, lo + n, size)), reference_tensor(clip.identity, size)[0]


def crop_box(size: int, crop: int, multiple: int, rng: np.random.Generator,
             mouth: bool = False) -> tuple[int, int, int]:
    """A crop aligned to the latent grid (the autoencoder is fully convolutional and its
    norms are per pixel, so crops train the same weights full frames use); with ``mouth``,
    one that holds the whole mouth region (``engine.photo.crops.CROP``)."""
    crop = min(crop, size)
    last = (size - crop) // multiple
    if not mouth:
        return int(rng.integers(0, last + 1)) * multiple, int(rng.integers(0, last + 1)) * multiple, crop

    def start(lo: float, hi: float) -> int:
        first = min(last, max(0, -(-(math.ceil(hi * size) - crop) // multiple)))
        return int(rng.integers(first, max(first, min(last, int(lo * size) // multiple)) + 1)) * multiple

    t, b, left, r = CROP
    return start(t, b), start(left, r), crop


def vae_loss(encoder: VAEEncoder, decoder: VAEDecoder, video: torch.Tensor, ref: torch.Tensor,
             weight: torch.Tensor, latent_noise: float = 0.05,
             latent_penalty: float = 1e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted L1 + MSE reconstruction from slightly noised latents -> (loss, plain L1).

    video (B, T, 3, h, w), ref (B, 3, h, w) the identity's reference, weight (B, 1, 1, h, w).
    """
    mean, _ = encoder(video, ref)
    z = mean + latent_noise * mean.detach().std() * torch.randn_like(mean)
    recon, _ = decoder.step(z, decoder.init_cache(decoder.reference(ref)))
    err = recon - video
    loss = ((err.abs() + err.pow(2)) * weight).mean() / weight.mean() + latent_penalty * mean.pow(2).mean()
    return loss, err.abs().mean()


def train_vae(encoder: VAEEncoder, decoder: VAEDecoder, clips: list[TrainingClip], steps: int, seed: int,
              batch: int = 4, latents: int = 3, lr: float = 3e-3, latent_noise: float = 0.05,
              latent_penalty: float = 1e-4, crop: int = 128, mouth_extra: float = 3.0,
              mouth_crops: float = 0.5) -> list[float]:
    """Trains on grid-aligned crops to spend the CPU on more steps rather than more pixels.
    Lip sync is read at the mouth, so the mouth region weighs more and a share
    ``mouth_crops`` of the crops always hold it: the mouth is a few percent of a frame, and
    drawing it on every kind of face (teeth and tongue on dark skin, not only a dark
    opening on light skin) takes many more examples than the rest."""
    v = encoder.config.vae
    size, td = v.height, v.temporal_down
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    weight_map = mouth_weight(size, size, mouth_extra)
    params = list(encoder.parameters()) + list(decoder.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    decoder.set_warp(False)  # the reference warp is learnt later, by its own stage (engine.train.warp)
    encoder.train()
    decoder.train()
    losses = []
    bar = tqdm(range(steps), desc="vae", unit="step")
    for _ in bar:
        videos, refs, weights = [], [], []
        for _ in range(batch):
            video, ref = random_window(clips, rng, latents, size, td)
            y, x, c = crop_box(size, crop, v.spatial_down, rng, mouth=rng.random() < mouth_crops)
            videos.append(video[..., y:y + c, x:x + c])
            refs.append(ref[..., y:y + c, x:x + c])
            weights.append(weight_map[y:y + c, x:x + c])
        loss, rec = vae_loss(encoder, decoder, torch.stack(videos), torch.stack(refs),
                             torch.stack(weights)[:, None, None], latent_noise, latent_penalty)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(rec.item())
        bar.set_postfix(l1=f"{np.mean(losses[-20:]):.4f}")
    encoder.eval()
    decoder.eval()
    return losses


@torch.no_grad()
def set_latent_stats(encoder: VAEEncoder, decoder: VAEDecoder, clips: list[TrainingClip], seed: int) -> None:
    """Normalise latents per channel over a sample of clips (both modules share the stats)."""
    rng = np.random.default_rng(seed)
    encoder.latent_shift.zero_()
    encoder.latent_scale.fill_(1.0)
    v = encoder.config.vae
    windows = [random_window(clips, rng, 5, v.height, v.temporal_down) for _ in range(16)]
    samples = [encoder(video[None], ref[None])[0] for video, ref in windows]
    z = torch.cat(samples, dim=1).transpose(0, 2).flatten(1)  # (c, N)
    shift, scale = z.mean(1), z.std(1).clamp_min(1e-3)
    for m in (encoder, decoder):
        m.latent_shift.copy_(shift)
        m.latent_scale.copy_(scale)
