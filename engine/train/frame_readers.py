"""Training the small readers of face frames (the openness probe, the motion reader): puppet
frames whose face state is known exactly, the augmentation that makes them look generated, the
training loop, and saving the weights.

Identities come from seeds below ``HELD_OUT_SEED``; evaluation uses seeds at or above it, so a
reader is always scored on faces it never saw.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from engine.puppet import FaceState, Identity, reference_image, render

HELD_OUT_SEED = 10_000  # identity seeds >= this are never used for training anything
RENDER_SIZE = 256
T = TypeVar("T")


def sample_state(rng: np.random.Generator) -> FaceState:
    """A random face state spanning (and a little beyond) what ``face_track_from_audio`` produces."""
    o = 0.0 if rng.random() < 0.2 else float(rng.uniform(0.0, 1.0))
    active = min(o / 0.25, 1.0)
    shape = rng.dirichlet([0.6, 0.6, 0.6]) * active
    return FaceState(
        openness=o,
        closed=1.0 - active,
        open=float(shape[0]),
        rounded=float(shape[1]),
        wide=float(shape[2]),
        blink=float(rng.uniform(0.0, 1.0)) if rng.random() < 0.2 else 0.0,
        yaw=float(np.clip(rng.normal(0.0, 0.1), -0.3, 0.3)),
        pitch=float(np.clip(rng.normal(0.0, 0.08), -0.25, 0.25)),
        roll=float(np.clip(rng.normal(0.0, 0.05), -0.15, 0.15)),
        tx=float(np.clip(rng.normal(0.0, 0.015), -0.04, 0.04)),
        ty=float(np.clip(rng.normal(0.0, 0.01), -0.03, 0.03)),
        brow=float(rng.uniform(-0.6, 1.0)),
        gaze_x=float(rng.uniform(-0.6, 0.6)),
        gaze_y=float(rng.uniform(-0.4, 0.4)),
    )


def puppet_frames(identity_seeds: range, per_identity: int, seed: int,
                  size: int = RENDER_SIZE) -> tuple[np.ndarray, np.ndarray, list[FaceState]]:
    """Puppet frames of random states: (N, S, S, 3) frames, (identities, S, S, 3) references
    (frame i is of identity i // per_identity) and the N states drawn."""
    rng = np.random.default_rng(seed)
    n = len(identity_seeds) * per_identity
    frames = np.empty((n, size, size, 3), dtype=np.uint8)
    refs = np.empty((len(identity_seeds), size, size, 3), dtype=np.uint8)
    states: list[FaceState] = []
    for k, s in enumerate(identity_seeds):
        ident = Identity.sample(np.random.default_rng(s), name=f"probe{s}")
        refs[k] = reference_image(ident, size)
        for j in range(per_identity):
            states.append(sample_state(rng))
            frames[k * per_identity + j] = render(ident, states[-1], size)
    return frames, refs, states


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Blur (down-up resampling), colour gain and noise on the frame crop only: what a
    generator's frames look like next to the clean reference it was given."""
    n, (h, w) = x.shape[0], x.shape[-2:]
    frame, ref = x[:, :3], x[:, 3:]
    blur = torch.rand(n, generator=gen) < 0.5
    if blur.any():
        k = int(torch.randint(w // 3, w, (1,), generator=gen))
        soft = F.interpolate(frame[blur], size=(max(1, k * h // w), k), mode="bilinear", antialias=True,
                             align_corners=False)
        frame = frame.clone()
        frame[blur] = F.interpolate(soft, size=(h, w), mode="bilinear", align_corners=False)
    gain = 1.0 + 0.08 * torch.randn(n, 3, 1, 1, generator=gen)
    noise = 0.03 * torch.rand(n, 1, 1, 1, generator=gen) * torch.randn(frame.shape, generator=gen)
    return torch.cat([(frame * gain + noise).clamp(0.0, 1.0), ref], dim=1)


def fit(net: nn.Module, inputs: list[torch.Tensor], target: torch.Tensor, steps: int, seed: int,
        name: str | None = None, log_every: int = 200) -> nn.Module:
    """Train a small reader of frame crops (``net(*inputs)`` against ``target``, smooth L1) with
    ``augment`` on every input, AdamW and a one-cycle schedule, deterministic for ``seed``;
    ``name`` prints the running loss. Returns ``net`` in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.15)
    running = 0.0
    for step in range(steps):
        idx = torch.randint(0, target.shape[0], (64,), generator=gen)
        loss = F.smooth_l1_loss(net(*(augment(t[idx], gen) for t in inputs)), target[idx], beta=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if name and (step + 1) % log_every == 0:
            print(f"{name} step {step + 1}/{steps} loss {running / log_every:.4f}")
            running = 0.0
    return net.eval()


def on_one_thread(train: Callable[[], T]) -> T:
    """Run ``train`` on one torch thread: the result then does not depend on the machine's core
    count, and it leaves the other cores to whatever else is running."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train()
    finally:
        torch.set_num_threads(threads)


def save_weights(net: nn.Module, out: Path, meta: dict[str, str]) -> None:
    """``net``'s weights to ``out`` (safetensors, with the training figures in ``meta``)."""
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out), metadata=meta)
