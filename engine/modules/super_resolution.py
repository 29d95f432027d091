"""Latent super-resolution: one step from low-res DiT latents to full VAE latents.

Conditioned on the full-resolution reference latent, so identity detail (eyes, teeth,
hair edges) comes from the reference rather than being re-invented every frame.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import EngineConfig
from engine.modules.base import Module
from engine.modules.vae import ResBlock


class SuperResolution(Module):
    kind = "super_resolution"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        c, w = config.vae.latent_channels, config.sr.width
        self.factor = config.dit.lr_factor
        self.conv_in = nn.Conv2d(2 * c, w, 3, padding=1)
        self.blocks = nn.Sequential(*(ResBlock(w) for _ in range(config.sr.blocks)))
        self.conv_out = nn.Conv2d(w, c, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, lr: torch.Tensor, ref_hr: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """lr (N, c, h, w), ref_hr (1 or N, c, H, W) -> (N, c, H, W)."""
        up = F.interpolate(lr.to(self.dtype), scale_factor=self.factor, mode="nearest")
        x = up if noise is None else up + self.config.sr.noise * noise.to(self.dtype)
        ref = ref_hr.to(self.dtype).expand(up.shape[0], -1, -1, -1)
        res = self.conv_out(self.blocks(self.conv_in(torch.cat([x, ref], dim=1))))
        return (up + res).float()


def pool_latents(hr: torch.Tensor, factor: int) -> torch.Tensor:
    """Full latents (..., c, H, W) -> the low-res latents the DiT generates."""
    lead = hr.shape[:-3]
    x = F.avg_pool2d(hr.reshape(-1, *hr.shape[-3:]), factor)
    return x.reshape(*lead, *x.shape[1:])
