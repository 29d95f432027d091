"""Teaching the decoder to warp the reference: the encoder stays as trained (the DiT's latent
space is unchanged), and the decoder learns from the latents of the ground truth and from those
latents pooled to the DiT's resolution and rebuilt by super-resolution, which is what it decodes
in a session; on whole frames by default (a flow moves pixels across the frame), or on crops."""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from engine.modules.super_resolution import SuperResolution, pool_latents
from engine.modules.vae import VAEDecoder, VAEEncoder
from engine.train.data import TrainingClip, eyes_weight, mouth_weight
from engine.train.vae import crop_box, random_window


@torch.no_grad()
def decoder_inputs(encoder: VAEEncoder, sr: SuperResolution, video: torch.Tensor, ref: torch.Tensor,
                   rebuilt: torch.Tensor, latent_noise: float, gen: torch.Generator) -> torch.Tensor:
    """Latents of ``video`` (B, T, 3, H, W); the rows where ``rebuilt`` is true went through
    the DiT's resolution and back through super-resolution. A little noise stands in for the
    DiT's error."""
    z = encoder(video, ref)[0]
    b, n = z.shape[:2]
    if bool(rebuilt.any()):
        flat = z.reshape(b * n, *z.shape[2:])
        ref_hr = encoder.encode_image(ref).repeat_interleave(n, dim=0)
        up = sr(pool_latents(flat, sr.factor), ref_hr).reshape(z.shape)
        z = torch.where(rebuilt[:, None, None, None, None], up, z)
    return z + latent_noise * z.std() * torch.randn(z.shape, generator=gen)


def warp_loss(decoder: VAEDecoder, z: torch.Tensor, video: torch.Tensor, ref: torch.Tensor,
              weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted L1 + MSE of the frames decoded from ``z`` against ``video`` -> (loss, the error)."""
    recon, _ = decoder.step(z, decoder.init_cache(decoder.reference(ref)))
    err = recon - video
    return ((err.abs() + err.pow(2)) * weight).mean() / weight.mean(), err


def train_warp(encoder: VAEEncoder, decoder: VAEDecoder, sr: SuperResolution, clips: list[TrainingClip], steps: int,
               seed: int, batch: int = 4, latents: int = 2, lr: float = 1e-3, latent_noise: float = 0.05,
               mouth_extra: float = 3.0, eyes_extra: float = 0.0, rebuilt_share: float = 0.5,
               crop: int | None = None, mouth_crops: float = 0.5) -> list[float]:
    """Weighted L1 + MSE of decoded frames -> the plain L1 of each step. The mouth and the eyes
    weigh more: they move on their own (speech, gaze, blinks), so the flow cannot bring them from
    the reference and the decoder must draw them, and they are where people look.

    ``crop``: train on grid-aligned crops of that size (a share ``mouth_crops`` holding the whole
    mouth, as the autoencoder's own stage does) instead of whole frames. The reference is cut
    the same way, so a flow inside the crop moves the same pixels; only a flow reaching past
    the crop's edge sees the edge's pixels instead of the frame's."""
    v = decoder.config.vae
    size, td = v.height, v.temporal_down
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    weight = (mouth_weight(size, size, mouth_extra) + eyes_weight(size, size, eyes_extra))[None, None, None]
    decoder.set_warp(True)
    opt = torch.optim.AdamW(decoder.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    encoder.eval()
    sr.eval()
    decoder.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="warp", unit="step")
    for _ in bar:
        videos, refs, weights = [], [], []
        for _ in range(batch):
            video, ref = random_window(clips, rng, latents, size, td)
            y, x, c = (0, 0, size) if crop is None else crop_box(size, crop, v.spatial_down, rng,
                                                                mouth=rng.random() < mouth_crops)
            videos.append(video[..., y:y + c, x:x + c])
            refs.append(ref[..., y:y + c, x:x + c])
            weights.append(weight[..., y:y + c, x:x + c])
        video, ref = torch.stack(videos), torch.stack(refs)
        rebuilt = torch.from_numpy(rng.random(batch) < rebuilt_share)
        z = decoder_inputs(encoder, sr, video, ref, rebuilt, latent_noise, gen)
        loss, err = warp_loss(decoder, z, video, ref, torch.cat(weights))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decoder.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(err.abs().mean().item())
        bar.set_postfix(l1=f"{np.mean(losses[-20:]):.4f}")
    decoder.eval()
    return losses
