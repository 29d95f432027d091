"""Temporal deblocking: the video counterpart of a codec's deblocking filter, applied in
time at the edges of the decoder's latent groups.

The causal VAE decodes each latent into ``temporal_down`` frames that share one latent's
information, so motion the DiT generates comes out in steps at every group edge (a judder
at fps / temporal_down, seen most at chunk joins). The filter carries a share of each
edge's jump into the group's first frames and lets it decay to zero within the group:
frame ``j`` of a group gets ``weights[j] * (previous output frame - first frame)`` added.
It needs only the last published frame, so it adds no latency; with weights that end at
zero before the group does, later frames are the decoder's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.modules.vae import latent_frames


def temporal_deblock(video: torch.Tensor, first_latent: int, previous: torch.Tensor | None,
                     weights: Sequence[float], temporal_down: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """video (n, 3, H, W): the frames of latents ``first_latent``, ``first_latent + 1``, ... as
    the decoder returns them; ``previous`` the output frame before them (None at the start of
    a stream) -> (filtered video, last output frame). Pure: the input is not modified."""
    if video.shape[0] == 0:
        return video, previous
    if not any(weights):
        return video, video[-1].clone()
    w = torch.tensor(weights, dtype=video.dtype, device=video.device)[:, None, None, None]
    out = video.clone()
    last = previous
    start = latent_frames(first_latent, temporal_down)[0]
    g = first_latent
    while (lo := latent_frames(g, temporal_down)[0] - start) < video.shape[0]:
        hi = latent_frames(g, temporal_down)[1] - start
        if last is not None:
            n = min(hi - lo, w.shape[0])
            out[lo:lo + n] += w[:n] * (last - video[lo])
        last = out[hi - 1]
        g += 1
    return out, last.clone()
