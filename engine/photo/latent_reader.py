"""Latent motion reader: the driver face's motion read straight from the DiT's low-res latents.

A drawn or photo session shows its drawer's frames, never the driver face the DiT generates; the
pixel reader (``engine.photo.reader``) needs that face decoded to 256² RGB only to read its motion
back. This reader takes the latents themselves, so those sessions skip super-resolution, the VAE
decoder and the pixel crops: about a third of a chunk's cost on a CPU.

It sees what the streaming decoder sees: a latent, the two before it (the decoder's causal
context) and the reference's latent (which separates a wide mouth at rest from an open one), and
gives the motion of each of the latent's ``temporal_down`` video frames. It is distilled from the
pixel reader on the bundled engine's own output (``engine.train.latent_reader``), so a session
reads the same motion either way.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from engine.photo.reader import OUTPUTS, SCALES
from engine.puppet import FaceState

LATENT_READER_PATH = Path(__file__).resolve().parent.parent / "weights" / "tiny" / "latent_reader.safetensors"
CONTEXT = 2  # latents before the one read, as the decoder's cache holds them
# The mouth is read as smoothly across latents as the pixel reader reads it; the head pose, eyes and
# brows jump at each latent's first frame unless that step is spread (``continuous``).
MOUTH = ("openness", "wide", "rounded")
_SPREAD = torch.tensor([name not in MOUTH for name, _ in OUTPUTS], dtype=torch.float32)  # 1: spread, 0: as read


class LatentMotionReader(nn.Module):
    """(latent, its ``CONTEXT`` predecessors, reference) -> scaled outputs for each of its frames."""

    def __init__(self, channels: int = 8, frames: int = 4, width: int = 96) -> None:
        super().__init__()
        self.frames = frames
        self.body = nn.Sequential(
            nn.Conv2d((CONTEXT + 2) * channels, width, 3, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.GELU(),
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.LazyLinear(256), nn.GELU(), nn.Linear(256, frames * len(OUTPUTS)))

    def forward(self, stacked: torch.Tensor) -> torch.Tensor:
        """(N, (CONTEXT + 2) * c, h, w) from ``stack_inputs`` -> (N, frames, len(OUTPUTS)) scaled outputs."""
        return self.head(self.body(stacked)).reshape(stacked.shape[0], self.frames, len(OUTPUTS))


def stack_inputs(latents: torch.Tensor, before: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The reader's input for each of ``latents`` (F, c, h, w), the consecutive latents of one
    session: ``before`` (CONTEXT, c, h, w) the latents preceding the first (zeros before the
    timeline's start), ``reference`` (c, h, w). -> (F, (CONTEXT + 2) * c, h, w)."""
    run = torch.cat([before, latents])
    rows = [torch.cat([*run[i:i + CONTEXT + 1].flip(0), reference]) for i in range(latents.shape[0])]
    return torch.stack(rows)


@functools.lru_cache(maxsize=2)
def load_latent_reader(path: Path = LATENT_READER_PATH) -> LatentMotionReader | None:
    """The shipped reader (loaded once per process, read-only), or None where none was trained."""
    if not path.exists():
        return None
    weights = load_file(str(path))
    net = LatentMotionReader(channels=weights["body.0.weight"].shape[1] // (CONTEXT + 2),
                             frames=weights["head.2.weight"].shape[0] // len(OUTPUTS))
    with torch.no_grad():
        net(torch.zeros(1, weights["body.0.weight"].shape[1], *_latent_hw(weights)))  # sizes the lazy layer
    net.load_state_dict(weights)
    return net.eval()


def _latent_hw(weights: dict[str, torch.Tensor]) -> tuple[int, int]:
    """The latent size a checkpoint was trained at, from its first linear layer's input width."""
    width = weights["body.2.weight"].shape[0]
    cells = weights["head.0.weight"].shape[1] // width  # after two stride-2 convolutions
    side = int(round(cells ** 0.5)) * 4
    return side, side


def continuous(values: torch.Tensor, shown: Sequence[int], last: torch.Tensor | None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A latent's frames are read together and the next latent's apart, so the step into each
    latent's first frame carries a jump the steps inside it do not: spread it over the latent's
    frames, for every output but the mouth's (spreading those would only delay the lips).
    ``values`` (L, frames, outputs) of consecutive latents, ``shown`` the slots
    (``latent * frames + frame``) that become frames, ``last`` the outputs of the frame shown
    before them (None at the start). -> the values, and the last shown frame's outputs."""
    out = values.clone()
    n = values.shape[1]
    fade = torch.linspace(1.0, 0.0, n + 1, dtype=values.dtype)[1:, None]  # 3/4, 1/2, 1/4, 0 for four frames
    fade = fade * _SPREAD.to(values.dtype)
    slots = set(shown)
    for k in range(values.shape[0]):
        own = [j for j in range(n) if k * n + j in slots]
        if not own:
            continue
        if last is not None and own[0] == 0:
            step = out[k, 1] - out[k, 0] if n > 1 else torch.zeros_like(last)
            out[k] -= (out[k, 0] - (last + step)) * fade
        last = out[k, own[-1]]
    return out, last


def to_states(values: torch.Tensor) -> list[FaceState]:
    """(n, len(OUTPUTS)) scaled outputs -> face states."""
    values = values * SCALES
    return [FaceState(**{name: float(v) for (name, _), v in zip(OUTPUTS, row, strict=True)})
            for row in values.tolist()]
