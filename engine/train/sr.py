"""Super-resolution training: pooled latents (with noise standing in for DiT error) ->
full latents, conditioned on the identity's reference latent."""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from engine.modules.super_resolution import SuperResolution, pool_latents
from engine.train.latents import LatentSet


def sr_loss(sr: SuperResolution, target: torch.Tensor, ref: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """MSE of the full latents ``target`` (N, c, H, W) rebuilt from their pooled, noised version."""
    n = target.shape[0]
    lr_in = pool_latents(target, sr.factor)
    lr_in = lr_in + 0.1 * torch.rand(n, 1, 1, 1, generator=gen) * torch.randn(lr_in.shape, generator=gen)
    return (sr(lr_in, ref) - target).pow(2).mean()


def train_sr(sr: SuperResolution, data: LatentSet, steps: int, seed: int, batch: int = 32,
             lr: float = 1e-3) -> list[float]:
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(sr.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    sr.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="sr", unit="step")
    for _ in bar:
        hr, refs = [], []
        for _ in range(batch):
            clip = data.clips[int(rng.integers(len(data.clips)))]
            hr.append(clip.hr[int(rng.integers(clip.hr.shape[0]))])
            refs.append(clip.ref_hr)
        loss = sr_loss(sr, torch.stack(hr), torch.stack(refs), gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.set_postfix(mse=f"{np.mean(losses[-50:]):.4f}")
    sr.eval()
    return losses
