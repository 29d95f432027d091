"""DecodeAndPublish: final latents -> RGB frames with media timestamps, via the streaming
causal VAE decoder and the temporal deblocking filter (the decoder's cache and the last
output frame are all that is carried to the next call)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.frames import PublishedFrame
from engine.modules.vae import DecoderCache, VAEDecoder, latent_frames
from engine.stages.deblock import temporal_deblock


@dataclass(frozen=True)
class DecodeInput:
    latents: torch.Tensor  # (F, c, H, W) full latents, in timeline order
    first_latent: int  # global index of latents[0]
    cache: DecoderCache
    audio: np.ndarray  # samples for the decoded frames' span (see ``frame_span``)
    frame_limit: int | None  # frames at or past this index are not published (end of stream)
    origin: tuple[str, ...]  # producing chunk of each latent
    previous: torch.Tensor | None = None  # the last output frame before these (deblocking)


@dataclass(frozen=True)
class DecodeOutput:
    frames: list[PublishedFrame]
    cache: DecoderCache
    last: torch.Tensor | None = None  # the last output frame, the next call's ``previous``


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
    x = frames.float().add(1).mul_(127.5).clamp_(0, 255).round_().to(torch.uint8)  # one new tensor
    return x.permute(0, 2, 3, 1).contiguous().cpu().numpy()


class DecodeAndPublish:
    def __init__(self, decoder: VAEDecoder, fps: int, sample_rate: int, deblock: Sequence[float] = ()) -> None:
        self.decoder = decoder
        self.deblock = tuple(deblock)
        self.fps = fps
        self.sample_rate = sample_rate
        self.spf = sample_rate // fps

    def __call__(self, inp: DecodeInput) -> DecodeOutput:
        count = inp.latents.shape[0]
        if count == 0:
            return DecodeOutput([], inp.cache, inp.previous)
        td = self.decoder.config.vae.temporal_down
        start, end = frame_span(inp.first_latent, count, td)
        if inp.audio.shape[0] != (end - start) * self.spf:
            raise ValueError("audio does not match the decoded frames")
        with torch.inference_mode():
            video, cache = self.decoder.step(inp.latents[None].to(self.decoder.device), inp.cache)
            if video.shape[1] != end - start:
                raise RuntimeError(f"decoder produced {video.shape[1]} frames, expected {end - start}")
            video, last = temporal_deblock(video[0], inp.first_latent, inp.previous, self.deblock, td)
        rgb = to_uint8(video)
        frames = []
        for i in range(end - start):
            n = start + i
            if inp.frame_limit is not None and n >= inp.frame_limit:
                break
            audio = inp.audio[i * self.spf:(i + 1) * self.spf]
            origin = inp.origin[frame_latent(n, td) - inp.first_latent]
            frames.append(PublishedFrame(n, self.fps, rgb[i], audio, self.sample_rate, origin))
        return DecodeOutput(frames, cache, last)
