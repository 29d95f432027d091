"""3D rotary position embedding (time, height, width) from precomputed tables.

Time positions are window slots, not absolute indices: a token at global latent
frame g gets slot ``g - base`` where ``base`` is fixed per chunk (see
:func:`window_base`). Relative positions, and so attention, are unchanged by the
re-basing, while slots stay inside the table however long the session runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def axis_split(head_dim: int) -> tuple[int, int, int]:
    """Rotary dims per axis (time, height, width); each even, summing to ``head_dim``."""
    hw = (head_dim // 4) // 2 * 2
    t = head_dim - 2 * hw
    if t % 2 or hw < 2:
        raise ValueError(f"head_dim {head_dim} too small or odd for 3D rope")
    return t, hw, hw


def _table(n: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * freqs[None]
    return angles.cos().float(), angles.sin().float()


@dataclass(frozen=True)
class RopeTables:
    cos_t: torch.Tensor
    sin_t: torch.Tensor
    cos_h: torch.Tensor
    sin_h: torch.Tensor
    cos_w: torch.Tensor
    sin_w: torch.Tensor

    @classmethod
    def build(cls, head_dim: int, time_slots: int, height: int, width: int, theta: float) -> RopeTables:
        dt, dh, dw = axis_split(head_dim)
        return cls(*_table(time_slots, dt, theta), *_table(height, dh, theta), *_table(width, dw, theta))

    @property
    def time_slots(self) -> int:
        return self.cos_t.shape[0]

    def to(self, device: torch.device) -> RopeTables:
        return RopeTables(*(t.to(device) for t in (self.cos_t, self.sin_t, self.cos_h, self.sin_h,
                                                    self.cos_w, self.sin_w)))

    def lookup(self, slot: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token (N,) positions -> cos, sin (N, head_dim / 2)."""
        if slot.numel() and (int(slot.min()) < 0 or int(slot.max()) >= self.time_slots):
            raise IndexError(f"time slot out of table range [0, {self.time_slots}): "
                             f"{int(slot.min())}..{int(slot.max())}")
        cos = torch.cat([self.cos_t[slot], self.cos_h[y], self.cos_w[x]], dim=-1)
        sin = torch.cat([self.sin_t[slot], self.sin_h[y], self.sin_w[x]], dim=-1)
        return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, N, H, D) by per-token angles (N, D/2); pairs are (first half, second half)."""
    a, b = x.float().chunk(2, dim=-1)
    c, s = cos[None, :, None], sin[None, :, None]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1).to(x.dtype)


def window_base(span_start: int, window: int) -> int:
    """Slot origin for a chunk whose generated span starts at global latent ``span_start``.

    Slot 0 holds the reference tokens, slots 1..window the history window, and the
    chunk's own frames follow; the same layout for every chunk of any session length.
    """
    return span_start - window - 1


def token_grid(frames: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Frame offset, row and column of each token for ``frames`` frames of ``height x width``."""
    f = torch.arange(frames).repeat_interleave(height * width)
    y = torch.arange(height).repeat_interleave(width).repeat(frames)
    x = torch.arange(width).repeat(height * frames)
    return f, y, x
