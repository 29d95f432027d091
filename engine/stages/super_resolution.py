"""SuperResolution stage: published low-res latents -> full VAE latents, one step, for one
session or a batch of sessions publishing as many latents each."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.modules.super_resolution import SuperResolution as SRModule


@dataclass(frozen=True)
class SRInput:
    latents: torch.Tensor  # (B, F, c, h, w) low-res, one row per session
    reference: torch.Tensor  # (B, c, H, W): each row's reference latent
    seeds: tuple[int, ...]  # each row's noise seed


@dataclass(frozen=True)
class SROutput:
    latents: torch.Tensor  # (B, F, c, H, W)


class SuperResolutionStage:
    def __init__(self, module: SRModule) -> None:
        self.module = module

    def __call__(self, inp: SRInput) -> SROutput:
        b, f, c, h, w = inp.latents.shape
        if len(inp.seeds) != b or inp.reference.shape[0] != b:
            raise ValueError(f"{b} rows of latents need {b} references and seeds")
        f2 = self.module.factor
        if f == 0:
            return SROutput(torch.zeros(b, 0, c, h * f2, w * f2))
        dev = self.module.device
        noise = None
        if self.module.config.sr.noise > 0:  # each row's own seeded noise, as if it ran alone
            noise = torch.cat([torch.randn(f, c, h * f2, w * f2, generator=torch.Generator().manual_seed(seed))
                               for seed in inp.seeds]).to(dev)
        reference = inp.reference.to(dev).repeat_interleave(f, 0)
        with torch.inference_mode():
            hr = self.module(inp.latents.reshape(b * f, c, h, w).to(dev), reference, noise)
        return SROutput(hr.reshape(b, f, *hr.shape[1:]))
