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


def group_offsets(first_frame: int, count: int, temporal_down: int) -> list[int]:
    """Each frame's position inside its latent group (frame 0 is a group of its own)."""
    return [0 if n == 0 else (n - 1) % temporal_down for n in range(first_frame, first_frame + count)]


def temporal_deblock(video: torch.Tensor, first_frame: int, previous: torch.Tensor | None,
                     weights: Sequence[float], temporal_down: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """video (n, 3, H, W) decoded frames from global index ``first_frame``; ``previous`` the
    output frame before them (None at the start of a stream) -> (filtered video, last output
    frame). Pure: the input is not modified. Calls start at a group edge, as whole latents
    decode."""
    if first_frame > 0 and (first_frame - 1) % temporal_down:
        raise ValueError(f"frame {first_frame} is inside a latent group; deblocking starts at group edges")
    if video.shape[0] == 0:
        return video, previous
    if not weights or not any(weights):
        return video, video[-1].clone()
    w = torch.tensor(weights, dtype=video.dtype, device=video.device)[:, None, None, None]
    out = video.clone()
    last = previous
    offsets = group_offsets(first_frame, video.shape[0], temporal_down)
    starts = [i for i, pos in enumerate(offsets) if pos == 0] + [video.shape[0]]
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        if last is not None:
            n = min(hi - lo, w.shape[0])
            out[lo:lo + n] += w[:n] * (last - video[lo])
        last = out[hi - 1]
    return out, None if last is None else last.clone()
