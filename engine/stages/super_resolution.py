"""SuperResolution stage: published low-res latents -> full VAE latents, one step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.modules.super_resolution import SuperResolution as SRModule


@dataclass(frozen=True)
class SRInput:
    latents: torch.Tensor  # (F, c, h, w) low-res
    reference: torch.Tensor  # (1, c, H, W)
    seed: int


@dataclass(frozen=True)
class SROutput:
    latents: torch.Tensor  # (F, c, H, W)


class SuperResolutionStage:
    def __init__(self, module: SRModule) -> None:
        self.module = module

    def __call__(self, inp: SRInput) -> SROutput:
        if inp.latents.shape[0] == 0:
            c, h, w = inp.reference.shape[1:]
            return SROutput(torch.zeros(0, c, h, w))
        dev = self.module.device
        noise = None
        if self.module.config.sr.noise > 0:
            gen = torch.Generator().manual_seed(inp.seed)
            f, c, h, w = inp.latents.shape
            f2 = self.module.factor
            noise = torch.randn(f, c, h * f2, w * f2, generator=gen).to(dev)
        with torch.inference_mode():
            hr = self.module(inp.latents.to(dev), inp.reference.to(dev), noise)
        return SROutput(hr)
