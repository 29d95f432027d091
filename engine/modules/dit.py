"""Audio-to-video DiT: a causal, chunked flow-matching transformer over latent video.

Tokens are patchified low-resolution latent frames. Each chunk attends to itself
(bidirectionally), to the reference tokens (their K/V computed once per session and
never evicted) and to a bounded window of previous latent frames (their K/V kept in a
ring buffer by the pipeline). Each latent frame cross-attends to its own audio tokens.
Per-frame timesteps let clean anchor frames sit beside noisy ones in one chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import EngineConfig
from engine.modules.base import Module
from engine.modules.rope import RopeTables, apply_rope, token_grid, window_base


@dataclass(frozen=True)
class KVBlock:
    """Un-roped keys/values of some tokens for every layer, with each token's latent frame.

    ``frame`` is the global latent index per token, shared by every row of a batch;
    reference tokens use -1.
    """

    k: torch.Tensor  # (layers, B, N, heads, head_dim)
    v: torch.Tensor
    frame: torch.Tensor  # (N,) int64

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v, self.frame))

    def frames(self) -> list[int]:
        return sorted(set(self.frame.tolist()))

    @staticmethod
    def concat(a: KVBlock | None, b: KVBlock) -> KVBlock:
        if a is None:
            return b
        return KVBlock(torch.cat([a.k, b.k], 2), torch.cat([a.v, b.v], 2), torch.cat([a.frame, b.frame]))

    def newest(self, frames: int) -> KVBlock:
        """The tokens of the newest ``frames`` latent frames."""
        keep = (self.frame > int(self.frame.max()) - frames).nonzero().squeeze(1)
        return KVBlock(self.k[:, :, keep], self.v[:, :, keep], self.frame[keep])

    def shifted(self, delta: int) -> KVBlock:
        """The same K/V moved ``delta`` latents along the timeline (reference tokens stay at -1)."""
        if delta == 0:
            return self
        return KVBlock(self.k, self.v, torch.where(self.frame < 0, self.frame, self.frame + delta))

    @staticmethod
    def stack(blocks: Sequence[KVBlock]) -> KVBlock:
        """Blocks of the same tokens (one row each) as one batch along B."""
        first = blocks[0]
        if len(blocks) == 1:
            return first
        if any(not torch.equal(b.frame, first.frame) for b in blocks[1:]):
            raise ValueError("only K/V blocks of the same frames stack into one batch")
        return KVBlock(torch.cat([b.k for b in blocks], 1), torch.cat([b.v for b in blocks], 1), first.frame)

    def split(self) -> list[KVBlock]:
        """One block per row along B, each a copy of its own (so no row keeps the batch alive)."""
        if self.k.shape[1] == 1:
            return [self]
        return [KVBlock(k.clone(), v.clone(), self.frame.clone())
                for k, v in zip(self.k.split(1, 1), self.v.split(1, 1), strict=True)]


@dataclass(frozen=True)
class AttnContext:
    """Roped context keys/values for one chunk, shared by all its denoising steps."""

    k: torch.Tensor  # (layers, B, heads, N, head_dim)
    v: torch.Tensor
    base: int


Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None],
                     torch.Tensor]


class TokenShard:
    """Which tokens of each latent frame this process computes, and how their self-attention
    reaches the others. On one device that is every token and plain attention; sequence
    parallelism (``engine.parallel.sequence``) puts one rank's share of each frame here, so
    the DiT's code is the same on one device and on many."""

    def local_count(self, per_frame: int) -> int:
        """Tokens of each frame held here."""
        return per_frame

    def local(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, F, T, ...) every token of each frame -> (B, F, local_count, ...) the ones held here."""
        return tokens

    def gather(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, F, local_count, ...) -> (B, F, T, ...) every token, on every process."""
        return tokens

    def positions(self, frames: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Frame offset, row and column of each token held here, for ``frames`` frames."""
        return token_grid(frames, height, width)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx_k: torch.Tensor | None,
               ctx_v: torch.Tensor | None) -> torch.Tensor:
        """Roped (B, H, N, hd) queries, keys and values of the tokens held here, with the roped
        context (B, H, Nc, hd) from :meth:`context` -> (B, H, N, hd)."""
        if ctx_k is not None:
            k, v = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        return F.scaled_dot_product_attention(q, k, v)

    def context(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Roped context keys and un-roped values (layers, B, N, H, hd) of the tokens held here
        -> the (layers, B, H, Nc, hd) that :meth:`attend` takes."""
        return k.transpose(2, 3).contiguous(), v.transpose(2, 3).contiguous()


ONE_DEVICE = TokenShard()


class Trunk(Protocol):
    """Runs the blocks and the output layer, where a DiT's blocks are spread over devices
    (``engine.parallel.pipeline_stages``): embedded tokens -> output tokens and the K/V of the
    blocks held here."""

    def __call__(self, dit: A2VDiT, x: torch.Tensor, mod: torch.Tensor, emb: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, ctx: AttnContext | None,
                 audio: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[..., None] * 1000.0 * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, audio_width: int, mlp_ratio: float) -> None:
        super().__init__()
        self.heads = heads
        hd = width // heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.q_norm, self.k_norm = RMSNorm(hd), RMSNorm(hd)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.cross_q = nn.Linear(width, width)
        self.cross_kv = nn.Linear(audio_width, 2 * width)
        self.cross_proj = nn.Linear(width, width)
        self.norm3 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width))
        self.mod = nn.Parameter(torch.zeros(6, width))

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
        return self.q_norm(q), self.k_norm(k), v

    def _attention_input(self, x: torch.Tensor, mod: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The modulated tokens (B, F * T, D) attention reads, and the six modulation terms."""
        b, f, t, d = x.shape
        terms = (mod + self.mod).unsqueeze(3).unbind(2)
        return (self.norm1(x) * (1 + terms[1]) + terms[0]).reshape(b, f * t, d), terms

    def forward(
        self,
        x: torch.Tensor,  # (B, F, T, D)
        mod: torch.Tensor,  # (B, F, 6, D)
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx_k: torch.Tensor | None,  # (B, H, Nc, hd) roped
        ctx_v: torch.Tensor | None,
        audio: torch.Tensor | None,  # (B, F, A, Da)
        attend: Attention = ONE_DEVICE.attend,
        kv_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> output tokens and this block's un-roped K, V of ``x``. ``kv_only``: stop at the K, V
        (all a history pass needs of the last block) and hand ``x`` back unchanged. It runs through
        ``forward`` so hooks on the block (sharding, offload) see it like any other call."""
        b, f, t, d = x.shape
        h, (shift1, scale1, gate1, shift2, scale2, gate2) = self._attention_input(x, mod)
        q, k, v = self.qkv_heads(h)
        if kv_only:
            return x, k, v
        qr, kr = apply_rope(q, cos, sin).transpose(1, 2), apply_rope(k, cos, sin).transpose(1, 2)
        att = attend(qr, kr, v.transpose(1, 2), ctx_k, ctx_v).transpose(1, 2).reshape(b, f, t, d)
        x = x + gate1 * self.proj(att)
        if audio is not None:
            hd = d // self.heads
            cq = self.cross_q(self.norm2(x)).reshape(b * f, t, self.heads, hd).transpose(1, 2)
            ck, cv = self.cross_kv(audio).reshape(b * f, audio.shape[2], 2, self.heads, hd).unbind(2)
            ca = F.scaled_dot_product_attention(cq, ck.transpose(1, 2), cv.transpose(1, 2))
            x = x + self.cross_proj(ca.transpose(1, 2).reshape(b, f, t, d))
        x = x + gate2 * self.mlp(self.norm3(x) * (1 + scale2) + shift2)
        return x, k, v


class A2VDiT(Module):
    """``velocity, chunk_kv = dit(x, t, audio, span_start, context)``."""

    kind = "a2v_dit"
    aligned_to_audio = True

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        c = config.dit
        if c.width % c.heads:
            raise ValueError("width must divide by heads")
        lh, lw = config.vae.latent_hw
        self.grid = (lh // c.lr_factor // c.patch, lw // c.lr_factor // c.patch)
        self.in_dim = config.vae.latent_channels * c.patch * c.patch
        d = c.width
        self.patch_embed = nn.Linear(self.in_dim, d)
        self.ref_embed = nn.Parameter(torch.zeros(d))
        self.time_mlp = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.time_mod = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.blocks = nn.ModuleList(Block(d, c.heads, config.audio.width, c.mlp_ratio) for _ in range(c.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_mod = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.out = nn.Linear(d, self.in_dim)
        s = config.schedule
        self.time_slots = c.window + 1 + max(s.chunk, 2 * (s.seam + s.anchor))
        self.rope = RopeTables.build(d // c.heads, self.time_slots, *self.grid, c.rope_theta)
        self._rope_on: dict[str, RopeTables] = {}
        # Where the work is spread over devices (engine.parallel): this process's tokens of
        # each frame, and what runs the blocks. One device: every token, every block here.
        self.shard: TokenShard = ONE_DEVICE
        self.trunk: Trunk | None = None
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    @property
    def tokens_per_frame(self) -> int:
        return self.grid[0] * self.grid[1]

    def patchify(self, lat: torch.Tensor) -> torch.Tensor:
        """(B, F, c, h, w) -> (B, F, T, c*p*p)."""
        b, f, ch, h, w = lat.shape
        p = self.config.dit.patch
        x = lat.reshape(b, f, ch, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4, 6)
        return x.reshape(b, f, (h // p) * (w // p), ch * p * p)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        b, f, _, _ = x.shape
        p = self.config.dit.patch
        gh, gw = self.grid
        ch = self.config.vae.latent_channels
        x = x.reshape(b, f, gh, gw, ch, p, p).permute(0, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, f, ch, gh * p, gw * p)

    def rope_tables(self) -> RopeTables:
        """The cos/sin tables on this module's device (fp32 whatever the weights' dtype)."""
        key = str(self.device)
        if key not in self._rope_on:
            self._rope_on[key] = self.rope.to(self.device)
        return self._rope_on[key]

    def _rope(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-frame slots (F,) -> cos/sin for each token held here of those frames. Positions stay
        on the host: the table lookup checks their range there, without waiting on the device."""
        f, y, x = self.shard.positions(len(slots), *self.grid)
        return self.rope_tables().lookup(slots[f], y, x)

    def _modulation(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        emb = self.time_mlp(timestep_embedding(t, 256).to(self.dtype))
        b, f, d = emb.shape
        return self.time_mod(emb).reshape(b, f, 6, d), emb

    def _run(
        self, tokens: torch.Tensor, t: torch.Tensor, slots: torch.Tensor, ctx: AttnContext | None,
        audio: torch.Tensor | None, reference: bool = False, kv_only: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """Tokens (B, F, T, in) -> output tokens and per-layer un-roped K, V of these tokens;
        ``kv_only``: the K, V alone (no output tokens: the last block stops at its K, V)."""
        x = self.patch_embed(tokens.to(self.dtype))
        if reference:
            x = x + self.ref_embed
        mod, emb = self._modulation(t)
        cos, sin = self._rope(slots)
        audio = audio.to(self.dtype) if audio is not None else None
        if self.trunk is not None:
            return self.trunk(self, x, mod, emb, cos, sin, ctx, audio)
        x, k, v = self.run_blocks(range(len(self.blocks)), x, mod, cos, sin, ctx, audio, kv_only)
        return (None if kv_only else self.final(x, emb)), k, v

    def run_blocks(
        self, blocks: Sequence[int], x: torch.Tensor, mod: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
        ctx: AttnContext | None, audio: torch.Tensor | None, kv_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Blocks ``blocks`` in order; ``ctx`` holds their layers in the same order. -> tokens and
        the un-roped K, V (len(blocks), B, N, heads, head_dim) of these tokens. ``kv_only``: the last
        block gives its K, V alone and the tokens returned are its input."""
        ks, vs = [], []
        for j, i in enumerate(blocks):
            ck = ctx.k[j] if ctx is not None else None
            cv = ctx.v[j] if ctx is not None else None
            last = kv_only and j == len(blocks) - 1
            x, k, v = self.blocks[i](x, mod, cos, sin, ck, cv, audio, self.shard.attend, kv_only=last)
            ks.append(k)
            vs.append(v)
        return x, torch.stack(ks), torch.stack(vs)

    def final(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The output layer: tokens (B, F, T, D) -> (B, F, T, in_dim)."""
        shift, scale = self.final_mod(emb).unsqueeze(2).chunk(2, dim=-1)
        return self.out(self.final_norm(x) * (1 + scale) + shift)

    def encode_reference(self, ref_lr: torch.Tensor) -> KVBlock:
        """Reference latent (B, c, h, w) -> its K/V for every layer (kept for the whole session)."""
        tokens = self.shard.local(self.patchify(ref_lr[:, None]))
        t = torch.zeros(ref_lr.shape[0], 1, device=self.device)
        _, k, v = self._run(tokens, t, torch.zeros(1, dtype=torch.long), None, None, reference=True)
        return KVBlock(k, v, torch.full((tokens.shape[2],), -1, dtype=torch.long))

    def context(self, span_start: int, ref: KVBlock, history: KVBlock | None) -> AttnContext:
        """Rope the reference (slot 0) and history K/V for a chunk starting at ``span_start``."""
        window = self.config.dit.window
        base = window_base(span_start, window)
        kv = KVBlock.concat(ref, history) if history is not None and history.frame.numel() else ref
        slots = torch.where(kv.frame < 0, torch.zeros_like(kv.frame), kv.frame - base)
        if history is not None and history.frame.numel() and int(history.frame.min()) <= base:
            raise ValueError("history frames fall outside the attention window")
        _, y, x = self.shard.positions(kv.frame.numel() // self.shard.local_count(self.tokens_per_frame), *self.grid)
        cos, sin = self.rope_tables().lookup(slots, y, x)
        layers, b, nc, h, hd = kv.k.shape
        k = apply_rope(kv.k.reshape(layers * b, nc, h, hd), cos, sin).reshape(layers, b, nc, h, hd)
        k, v = self.shard.context(k, kv.v)
        return AttnContext(k=k, v=v, base=base)

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, audio: torch.Tensor, span_start: int, ctx: AttnContext,
        kv_only: bool = False,
    ) -> tuple[torch.Tensor | None, KVBlock]:
        """x (B, F, c, h, w) latents at per-frame noise level t (B, F) -> velocity and this chunk's
        K/V; ``kv_only``: no velocity (None), for passes that only build K/V (the history window)."""
        f = x.shape[1]
        slots = torch.arange(f) + span_start - ctx.base
        out, k, v = self._run(self.shard.local(self.patchify(x)), t, slots, ctx, audio, kv_only=kv_only)
        frame = (torch.arange(f) + span_start).repeat_interleave(self.shard.local_count(self.tokens_per_frame))
        velocity = None if out is None else self.unpatchify(self.shard.gather(out).float())
        return velocity, KVBlock(k, v, frame)
