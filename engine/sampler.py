"""Few-step flow-matching sampler (rectified flow, velocity prediction).

``x_t = (1 - t) x_0 + t * noise``; the model predicts ``v = noise - x_0``; sampling
integrates from t = 1 to t = 0 with Euler steps on a shifted timestep grid (more
steps spent at high noise, where structure is decided).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def timesteps(steps: int, shift: float) -> list[float]:
    if not 1 <= steps <= 8:
        raise ValueError(f"steps must be in 1..8, got {steps}")
    grid = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    shifted = shift * grid / (1 + (shift - 1) * grid)
    return [float(t) for t in shifted]


def noised(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
    if isinstance(t, torch.Tensor):
        t = t.reshape(*t.shape, *([1] * (x0.dim() - t.dim())))
    return (1 - t) * x0 + t * noise


def sample(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    fixed: torch.Tensor,
    fixed_t: float,
    steps: int,
    shift: float,
) -> torch.Tensor:
    """Integrate ``start`` (pure noise on free frames) from t = 1 to 0.

    Frames where ``fixed`` (B, F) is True keep their value from ``start`` throughout.

    ``velocity(x, t)`` takes x (B, F, ...) and per-frame t (B, F). Fixed frames are
    clean anchors given at noise level ``fixed_t``; their predictions are ignored.
    """
    x = start
    grid = timesteps(steps, shift)
    mask = fixed.reshape(*fixed.shape, *([1] * (start.dim() - fixed.dim())))
    for t, t_next in zip(grid[:-1], grid[1:], strict=True):
        t_frames = torch.where(fixed, torch.full_like(fixed, fixed_t, dtype=torch.float32),
                               torch.full_like(fixed, t, dtype=torch.float32))
        v = velocity(x, t_frames)
        x = torch.where(mask, x, x + (t_next - t) * v)
    return x
