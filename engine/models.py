"""The set of modules an engine config needs, built from bundled weights or a seed."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.modules.audio_encoder import AudioEncoder
from engine.modules.base import Module
from engine.modules.dit import A2VDiT
from engine.modules.super_resolution import SuperResolution
from engine.modules.vae import VAEDecoder, VAEEncoder

WEIGHTS_DIR = Path(__file__).parent / "weights"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def compute_dtype(name: str, device: str) -> torch.dtype:
    """``auto`` is bf16 on CUDA and on a CPU where bf16 pays (``cpu_bf16_pays``), else fp32."""
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") or cpu_bf16_pays() else torch.float32
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose auto or one of {', '.join(DTYPES)}")
    return DTYPES[name]


@functools.cache
def cpu_bf16_pays() -> bool:
    """Whether this CPU multiplies bf16 matrices clearly faster than fp32. With bf16 units (AVX-512
    BF16, AMX) it does, and the tiny engine's chunks cost about a fifth less at the same lip sync;
    without them bf16 is emulated, up to ~100x slower. Timed once per process (a few ms), not
    guessed from the CPU's name: machines that report the same model differ."""
    a, b = torch.randn(128, 768), torch.randn(768, 768)

    def fastest(x: torch.Tensor, y: torch.Tensor) -> float:
        x @ y
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            x @ y
            times.append(time.perf_counter() - t0)
        return min(times)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core's kernels: a busy neighbour core would stall a two-thread timing
    try:
        return fastest(a.bfloat16(), b.bfloat16()) < 0.8 * fastest(a, b)
    finally:
        torch.set_num_threads(threads)


@dataclass
class ModelSet:
    audio: AudioEncoder
    encoder: VAEEncoder
    dit: A2VDiT
    sr: SuperResolution
    decoder: VAEDecoder

    def modules(self) -> dict[str, Module]:
        return {"audio": self.audio, "encoder": self.encoder, "dit": self.dit, "sr": self.sr,
                "decoder": self.decoder}

    @classmethod
    def build(cls, config: EngineConfig, seed: int = 0) -> ModelSet:
        """Fresh modules with deterministic random weights."""
        torch.manual_seed(seed)
        return cls(AudioEncoder(config), VAEEncoder(config), A2VDiT(config), SuperResolution(config),
                   VAEDecoder(config))

    def load_dir(self, folder: Path) -> list[str]:
        """Load every ``<name>.safetensors`` present in ``folder``; returns the names loaded."""
        loaded = []
        for name, module in self.modules().items():
            path = folder / f"{name}.safetensors"
            if path.exists():
                module.load(path)
                loaded.append(name)
        return loaded

    def save_dir(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, module in self.modules().items():
            module.save(folder / f"{name}.safetensors")

    def place(self, device: str, dtype: torch.dtype) -> ModelSet:
        """Compute-heavy modules in ``dtype``; the per-session encoders stay in fp32."""
        self.audio.place(device, torch.float32)
        self.encoder.place(device, torch.float32)
        for m in (self.dit, self.sr, self.decoder):
            m.place(device, dtype)
        for m in self.modules().values():
            m.eval().requires_grad_(False)
        return self

    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for m in self.modules().values() for p in m.parameters())
