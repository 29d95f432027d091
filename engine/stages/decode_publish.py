"""DecodeAndPublish: final latents -> RGB frames with media timestamps, via the streaming
causal VAE decoder and the temporal deblocking filter (the decoder's cache and the last
output frame are all that is carried to the next call). One decoder step serves a batch of
sessions publishing as many latents each; deblocking and publishing are per session."""

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
    """B rows, one per session; tuples hold each row's entry."""

    latents: torch.Tensor  # (B, F, c, H, W) full latents, in timeline order
    first_latent: tuple[int, ...]  # global index of each row's latents[0]
    cache: DecoderCache  # B rows
    audio: tuple[np.ndarray, ...]  # samples for the decoded frames' span (see ``frame_span``)
    frame_limit: tuple[int | None, ...]  # frames at or past this index are not published (end of stream)
    origin: tuple[tuple[str, ...], ...]  # producing chunk of each latent
    previous: tuple[torch.Tensor | None, ...]  # the last output frame before these (deblocking)


@dataclass(frozen=True)
class DecodeOutput:
    frames: list[list[PublishedFrame]]  # per row
    cache: DecoderCache  # B rows
    last: tuple[torch.Tensor | None, ...]  # each row's last output frame, its next call's ``previous``


def frame_span(first_latent: int, count: int, temporal_down: int) -> tuple[int, int]:
    """Video frames [start, end) covered by ``count`` latents from ``first_latent``."""
    if count == 0:
        start = latent_frames(first_latent, temporal_down)[0]
        return start, start
    return latent_frames(first_latent, temporal_down)[0], latent_frames(first_latent + count - 1, temporal_down)[1]


def frame_latent(n: int, temporal_down: int) -> int:
    """The latent that covers video frame ``n``."""
    return 0 if n == 0 else (n - 1) // temporal_down + 1


def published_frames(first_latent: int, count: int, frame_limit: int | None, temporal_down: int) -> range:
    """The video frames ``count`` latents from ``first_latent`` publish: those before ``frame_limit``."""
    start, end = frame_span(first_latent, count, temporal_down)
    if frame_limit is not None:
        end = max(start, min(end, frame_limit))
    return range(start, end)


def stamped(shown: range, images: Sequence[np.ndarray], first_latent: int, audio: np.ndarray,
            origin: tuple[str, ...], fps: int, sample_rate: int, temporal_down: int) -> list[PublishedFrame]:
    """Frames ``shown`` (each its image) on the media timeline, each with its span of ``audio`` (which
    starts at ``shown``'s first frame) and the chunk that made its latent."""
    spf = sample_rate // fps
    return [PublishedFrame(n, fps, image, audio[i * spf:(i + 1) * spf], sample_rate,
                           origin[frame_latent(n, temporal_down) - first_latent])
            for i, (n, image) in enumerate(zip(shown, images, strict=True))]


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
        rows, count = inp.latents.shape[:2]
        if count == 0:
            return DecodeOutput([[] for _ in range(rows)], inp.cache, inp.previous)
        td = self.decoder.config.vae.temporal_down
        for first, audio in zip(inp.first_latent, inp.audio, strict=True):
            start, end = frame_span(first, count, td)
            if audio.shape[0] != (end - start) * self.spf:
                raise ValueError("audio does not match the decoded frames")
        with torch.inference_mode():
            video, cache = self.decoder.step(inp.latents.to(self.decoder.device), inp.cache)
        published = [self._publish(video[i], inp.first_latent[i], count, inp.audio[i], inp.frame_limit[i],
                                   inp.origin[i], inp.previous[i]) for i in range(rows)]
        return DecodeOutput([frames for frames, _ in published], cache, tuple(last for _, last in published))

    def _publish(self, video: torch.Tensor, first_latent: int, count: int, audio: np.ndarray,
                 frame_limit: int | None, origin: tuple[str, ...],
                 previous: torch.Tensor | None) -> tuple[list[PublishedFrame], torch.Tensor | None]:
        """One row's decoded frames deblocked and timestamped."""
        td = self.decoder.config.vae.temporal_down
        start, end = frame_span(first_latent, count, td)
        if video.shape[0] != end - start:
            raise RuntimeError(f"decoder produced {video.shape[0]} frames, expected {end - start}")
        with torch.inference_mode():
            video, last = temporal_deblock(video, first_latent, previous, self.deblock, td)
        rgb = to_uint8(video)
        shown = published_frames(first_latent, count, frame_limit, td)
        return stamped(shown, rgb[:len(shown)], first_latent, audio, origin, self.fps, self.sample_rate, td), last
