"""Base class for engine modules: weights I/O and placement, no scheduling logic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from engine.config import EngineConfig

Net = TypeVar("Net", bound=nn.Module)


def load_trained(net: Net, path: Path, what: str, trainer: str) -> Net:
    """``net`` with the weights its trainer ships at ``path``, in eval mode; where there are none,
    ``FileNotFoundError`` says which trainer makes them."""
    if not path.exists():
        raise FileNotFoundError(f"no {what} at {path}; run `python -m {trainer}` to train one")
    net.load_state_dict(load_file(str(path)))
    return net.eval()


class Module(nn.Module):
    """One model of the engine.

    Knows its config, where it lives (device, dtype) and how to load and save itself
    as safetensors with the engine config embedded, so a checkpoint cannot be loaded
    into a model of another shape by accident.
    """

    kind: str = "module"
    # Trained on audio windows cut a particular way: the lookahead is part of what it learned.
    aligned_to_audio: bool = False

    def __init__(self, config: EngineConfig) -> None:
        super().__init__()
        self.config = config

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def place(self, device: str | torch.device, dtype: torch.dtype | None = None) -> Module:
        """Move weights (pinned CPU memory when leaving a GPU, to make the way back fast)."""
        self.to(device=device, dtype=dtype)
        if torch.device(device).type == "cpu" and torch.cuda.is_available():
            for p in self.parameters():
                p.data = p.data.pin_memory()
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, path: str | Path) -> None:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path), metadata={"kind": self.kind, "config": self.config.to_json()})

    def load(self, path: str | Path, strict: bool = True) -> Module:
        """Load weights saved by :meth:`save`; refuses checkpoints of another kind or shape."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("kind") != self.kind:
            raise ValueError(f"{path}: checkpoint holds a {meta.get('kind')!r}, expected {self.kind!r}")
        stored = EngineConfig.from_json(meta["config"])
        if self.shape_signature(stored) != self.shape_signature(self.config):
            raise ValueError(f"{path}: checkpoint was made for config {stored.name!r} of another shape"
                             + (" or audio window" if self.aligned_to_audio else ""))
        state = load_file(str(path), device="cpu")
        self.load_state_dict(state, strict=strict)
        return self

    def shape_signature(self, config: EngineConfig) -> object:
        """The part of a config that decides this module's tensor shapes.

        Run-time knobs (sampling steps, timestep shift, guidance, compute dtype, the I-chunk pass,
        deblocking, the fast preset's chunk and steps, redrawn sessions' steps, how the history
        window is kept) are left out, so ``--steps``/``--guidance``/``--no-interp``/``dtype``/
        ``--no-deblock`` work with saved weights.
        """
        raw = json.loads(config.to_json())
        for key in ("steps", "interp_steps", "shift", "dtype", "audio_guidance", "guidance_steps", "deblock",
                    "fast_chunk", "fast_steps", "redrawn_steps", "append_history"):
            raw.pop(key, None)
        raw["schedule"].pop("interp", None)
        if not self.aligned_to_audio:
            raw["audio"].pop("lookahead_ms", None)
        return raw
