"""DecodeAndPublish: final latents -> RGB frames with media timestamps, via the streaming
causal VAE decoder (its cache is the only thing carried to the next call)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.frames import PublishedFrame
from engine.modules.vae import DecoderCache, VAEDecoder, latent_frames


@dataclass(frozen=True)
class DecodeInput:
    latents: torch.Tensor  # (F, c, H, W) full latents, in timeline order
    first_latent: int  # global index of latents[0]
    cache: DecoderCache
    audio: np.ndarray  # samples for the decoded frames' span (see ``frame_span``)
    frame_limit: int | None  # frames at or past this index are not published (end of stream)
    origin: tuple[str, ...]  # producing chunk of each latent


@dataclass(frozen=True)
class DecodeOutput:
    frames: list[PublishedFrame]
    cache: DecoderCache


def frame_span(first_latent: int, count: int, temporal_down: int) -> tuple[int, int]:
    """Video frames [start, end) covered by ``count`` latents from ``first_latent``."""
    if count == 0:
        start = latent_frames(first_latent, temporal_down)[0]
        return start, start
    return latent_frames(first_latent, temporal_down)[0], latent_frames(first_latent + count - 1, temporal_down)[1]


def frame_latent(n: int, temporal_down: int) -> int:
    """The latent that covers video frame ``n``."""
    return 0 if n == 0 else (n - 1) // temporal_down + 1


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    """(n, 3, H, W) in [-1, 1] -> (n, H, W, 3) uint8."""
    x = ((frames.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).contiguous().cpu().numpy()


class DecodeAndPublish:
    def __init__(self, decoder: VAEDecoder, fps: int, sample_rate: int) -> None:
        self.decoder = decoder
        self.fps = fps
        self.sample_rate = sample_rate
        self.spf = sample_rate // fps

    def __call__(self, inp: DecodeInput) -> DecodeOutput:
        count = inp.latents.shape[0]
        if count == 0:
            return DecodeOutput([], inp.cache)
        start, end = frame_span(inp.first_latent, count, self.decoder.config.vae.temporal_down)
        if inp.audio.shape[0] != (end - start) * self.spf:
            raise ValueError("audio does not match the decoded frames")
        with torch.inference_mode():
            video, cache = self.decoder.step(inp.latents[None].to(self.decoder.device), inp.cache)
        rgb = to_uint8(video[0])
        if rgb.shape[0] != end - start:
            raise RuntimeError(f"decoder produced {rgb.shape[0]} frames, expected {end - start}")
        td = self.decoder.config.vae.temporal_down
        frames = []
        for i in range(end - start):
            n = start + i
            if inp.frame_limit is not None and n >= inp.frame_limit:
                break
            audio = inp.audio[i * self.spf:(i + 1) * self.spf]
            origin = inp.origin[frame_latent(n, td) - inp.first_latent]
            frames.append(PublishedFrame(n, self.fps, rgb[i], audio, self.sample_rate, origin))
        return DecodeOutput(frames, cache)
