"""Sequence parallelism for the A2V DiT (Ulysses attention over a causal, windowed DiT).

Each rank holds the same share of every latent frame's tokens: frame tokens are padded to a
multiple of the world size and rank r takes the r-th slice of each frame. Everything but
self-attention is per token or per frame (modulation, audio cross-attention, MLP), so it runs
on the local share unchanged. Self-attention trades tokens for heads: one fused all-to-all
sends every rank its heads' Q, K and V of all tokens, attention runs over the reference,
history and chunk keys, and one all-to-all returns the outputs to the tokens' owners.

RoPE is applied by each rank to the tokens it holds, from the precomputed tables, at the
window slot it derives itself from the global time index (``slot = frame - base``): no
positions cross ranks. The rolling state keeps each rank's share: the reference and history
K/V of a session on rank r are the K/V of rank r's tokens, re-roped locally every chunk and
redistributed by heads once per chunk (one all-to-all), not once per denoising step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from engine.modules.dit import TokenShard


class UlyssesShard(TokenShard):
    """Rank ``rank`` of ``world``: its slice of every frame's ``per_frame`` tokens."""

    def __init__(self, rank: int, world: int, heads: int, per_frame: int) -> None:
        if heads % world:
            raise ValueError(f"sequence parallelism over {world} ranks needs heads divisible by it, not {heads}")
        self.rank, self.world, self.per_frame = rank, world, per_frame
        self.share = -(-per_frame // world)  # tokens of each frame per rank, the last rank's padded
        self.padded = self.share * world

    def local_count(self, per_frame: int) -> int:
        return self.share

    def local(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = self.padded - tokens.shape[2]
        if pad:
            tokens = torch.cat([tokens, tokens.new_zeros(*tokens.shape[:2], pad, *tokens.shape[3:])], dim=2)
        lo = self.rank * self.share
        return tokens[:, :, lo:lo + self.share].contiguous()

    def gather(self, tokens: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tokens) for _ in range(self.world)]
        dist.all_gather(parts, tokens.contiguous())
        return torch.cat(parts, dim=2)[:, :, :self.per_frame]

    def positions(self, frames: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's tokens of each frame; padding tokens get position (0, 0) (any row in the
        table: they are never attended to and their outputs are dropped)."""
        index = torch.arange(self.rank * self.share, (self.rank + 1) * self.share)
        real = index < self.per_frame
        y = torch.where(real, index // width, 0).repeat(frames)
        x = torch.where(real, index % width, 0).repeat(frames)
        return torch.arange(frames).repeat_interleave(self.share), y, x

    def _real(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """``x`` without the padding tokens along ``dim``, where tokens gathered from all ranks
        lie rank-major (and frame-major within a rank). Host-side indices: no device sync."""
        if self.padded == self.per_frame:
            return x
        frames = x.shape[dim] // (self.world * self.share)
        index = torch.arange(self.world)[:, None, None] * self.share + torch.arange(self.share)
        real = (index < self.per_frame).expand(self.world, frames, self.share).reshape(-1)
        return x.index_select(dim, real.nonzero().squeeze(1).to(x.device))

    def _heads_to_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H, n, hd) this rank's tokens, every head -> (..., H / world, world * n, hd)
        every rank's tokens of this rank's heads, in one all-to-all."""
        *lead, h, n, hd = x.shape
        d = len(lead)
        send = x.reshape(*lead, self.world, h // self.world, n, hd).movedim(d, 0).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        return recv.movedim(0, d + 1).reshape(*lead, h // self.world, self.world * n, hd)

    def _tokens_to_heads(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse: (B, H / world, world * n, hd) -> (B, H, n, hd), in one all-to-all."""
        b, hl, total, hd = x.shape
        n = total // self.world
        send = x.reshape(b, hl, self.world, n, hd).movedim(2, 0).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        return recv.movedim(0, 1).reshape(b, self.world * hl, n, hd)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx_k: torch.Tensor | None,
               ctx_v: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self._heads_to_tokens(torch.stack([q, k, v])).unbind(0)
        k, v = self._real(k, 2), self._real(v, 2)
        if ctx_k is not None:
            k, v = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        return self._tokens_to_heads(F.scaled_dot_product_attention(q, k, v))

    def context(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self._real(self._heads_to_tokens(torch.stack([k, v]).transpose(3, 4)), 4)
        return kv[0].contiguous(), kv[1].contiguous()
