"""GPU hygiene on the one-device path, taken only on CUDA (on a CPU nothing changes).

Each is switched on by name, so ``bench/gpu.sh`` measures what each pays, and each is kept
only where it does:

- ``resident``: a chunk's latents stay on the device between the A2V stage and SR instead of
  going to the host and back (no host synchronisation per chunk; frames still come to the
  host once, when they are published).
- ``fused``: attention only through fused SDPA kernels (flash or memory-efficient), never the
  unfused math fallback. The compute dtype is bf16 on CUDA already (``dtype = auto``).
- ``compile``: every DiT block through ``torch.compile`` for the chunk's fixed shapes.
- ``graphs``: the same, with CUDA graphs (``mode="reduce-overhead"``): one launch per block.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from engine.pipeline import Pipeline

FEATURES = ("resident", "fused", "compile", "graphs")


def apply_hygiene(pipe: Pipeline, features: Iterable[str]) -> tuple[str, ...]:
    """Switch ``features`` on for ``pipe`` where it runs on CUDA; those applied."""
    wanted = tuple(features)
    unknown = sorted(set(wanted) - set(FEATURES))
    if unknown:
        raise ValueError(f"unknown hygiene {', '.join(unknown)}; choose from {', '.join(FEATURES)}")
    if not pipe.device.startswith("cuda"):
        return ()
    if "resident" in wanted:
        pipe.a2v.keep_on_device = True
    if "fused" in wanted:
        torch.backends.cuda.enable_math_sdp(False)
    if "compile" in wanted or "graphs" in wanted:
        mode = "reduce-overhead" if "graphs" in wanted else None
        for block in pipe.models.dit.blocks:
            block.compile(dynamic=False, mode=mode)
    return tuple(f for f in FEATURES if f in wanted)
