"""Pinned offload with block prefetch: one device holds only what runs now and what runs next.

Units are the DiT's blocks, the SR module and the decoder (and the VAE encoder, used only
when a session opens). At home they live in pinned CPU memory. Just before a unit runs it
must be resident; the copy of the unit after it is issued on a side stream as it starts, so
the copy overlaps its compute, and a unit is released (its device copy dropped) as soon as it
has run. The order is the order of execution: block 0 .. block N-1 for every DiT forward of a
chunk, then SR (prefetched during the chunk's last forward), the decoder, and block 0 of the
next chunk. The DiT's embeddings, output layer and the audio encoder stay resident (small).

What waiting for a unit costs is the model-switch time, recorded per boundary (``dit→sr``,
``sr→decoder``, ``decoder→dit``, ``dit→dit`` between blocks). On a CPU the copies are no-ops
(home and device memory are the same) and the same schedule runs: ``log`` records it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch
from torch import nn

from engine.hooks import PipelineHook
from engine.pipeline import Pipeline

Tensors = list[tuple[nn.Module, str, bool]]  # (owner, attribute, is a parameter)


def _tensors(module: nn.Module) -> Tensors:
    out: Tensors = []
    for owner in module.modules():
        out += [(owner, name, True) for name, p in owner._parameters.items() if p is not None]
        out += [(owner, name, False) for name, b in owner._buffers.items() if b is not None]
    return out


def _get(owner: nn.Module, name: str, param: bool) -> torch.Tensor:
    return owner._parameters[name].data if param else owner._buffers[name]


def _set(owner: nn.Module, name: str, param: bool, value: torch.Tensor) -> None:
    if param:
        owner._parameters[name].data = value
    else:
        owner._buffers[name] = value


def stage_of(unit: str) -> str:
    return "dit" if unit.startswith("block") else unit


class Offloader:
    """Residency of a pipeline's units on its device; install with :meth:`install`."""

    def __init__(self, units: dict[str, nn.Module], device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.units = units
        self.tensors = {name: _tensors(m) for name, m in units.items()}
        self.home: dict[str, list[torch.Tensor]] = {}
        for name, tensors in self.tensors.items():
            home = [self._to_home(_get(*t)) for t in tensors]
            for t, h in zip(tensors, home, strict=True):
                _set(*t, h)
            self.home[name] = home
        self.resident: dict[str, torch.cuda.Event | None] = {}
        self.log: list[tuple[str, str]] = []  # (prefetch | run | release, unit), in order
        self.switch_s: dict[str, list[float]] = {}
        self.measure = not self.cuda  # timing a wait on a GPU synchronises: the bench turns it on
        self.forwards_left: int | None = None
        self.then = "sr"  # what follows the chunk's last forward: SR, or the next chunk if it publishes nothing
        self.last = "decoder"  # the unit that ran last: a chunk starts after the previous decode
        self.depth = sum(1 for name in units if name.startswith("block"))

    def _to_home(self, t: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            return t  # a CPU is its own home: copies are no-ops
        return t.detach().to("cpu").pin_memory()

    # ---- residency ------------------------------------------------------------------------

    def fetch(self, unit: str) -> None:
        """Start copying ``unit`` to the device (on the side stream), unless it is there."""
        if unit in self.resident:
            return
        self.log.append(("prefetch", unit))
        event = None
        if self.cuda:
            with torch.cuda.stream(self.stream), torch.inference_mode(False):
                for t, home in zip(self.tensors[unit], self.home[unit], strict=True):
                    _set(*t, home.to(self.device, non_blocking=True))
            event = torch.cuda.Event()
            event.record(self.stream)
        self.resident[unit] = event

    def ensure(self, unit: str) -> None:
        """``unit`` is about to run: make the compute stream wait for its copy."""
        self.fetch(unit)
        event = self.resident[unit]
        started = time.perf_counter()
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for t in self.tensors[unit]:
                _get(*t).record_stream(current)  # its memory is not reused while compute reads it
            if self.measure:
                event.synchronize()
        if self.measure:
            boundary = f"{stage_of(self.last)}→{stage_of(unit)}"
            self.switch_s.setdefault(boundary, []).append(time.perf_counter() - started)
        self.log.append(("run", unit))
        self.last = unit

    def release(self, unit: str) -> None:
        """``unit`` has run: back to its pinned home; the device copy is freed."""
        if self.resident.pop(unit, False) is False:
            return
        for t, home in zip(self.tensors[unit], self.home[unit], strict=True):
            _set(*t, home)
        self.log.append(("release", unit))

    @contextmanager
    def holding(self, *units: str) -> Iterator[None]:
        for unit in units:
            self.ensure(unit)
        try:
            yield
        finally:
            for unit in units:
                self.release(unit)

    def switch_ms(self) -> dict[str, float]:
        """Mean wait per stage boundary, in ms."""
        return {k: 1000 * sum(v) / len(v) for k, v in sorted(self.switch_s.items()) if v}

    # ---- hooks ----------------------------------------------------------------------------

    def _after(self, block: int) -> str:
        """What runs after ``block``: the next block, or after a chunk's last forward, SR."""
        if block + 1 < self.depth:
            return f"block{block + 1}"
        return self.then if self.forwards_left == 1 else "block0"

    def before_block(self, block: int) -> None:
        """DiT block ``block`` is about to run (its forward pre-hook): resident, its successor fetched."""
        self.ensure(f"block{block}")
        self.fetch(self._after(block))

    def after_block(self, block: int) -> None:
        """DiT block ``block`` has run (its forward hook): released, one forward fewer to go after the last."""
        self.release(f"block{block}")
        if block + 1 == self.depth and self.forwards_left:
            self.forwards_left -= 1

    @classmethod
    def install(cls, pipe: Pipeline) -> Offloader:
        """Offload ``pipe``'s units and hook the schedule into its DiT blocks and its pipeline (and
        the sibling pipelines it makes: quality presets over the same models)."""
        models = pipe.models
        units: dict[str, nn.Module] = {f"block{i}": b for i, b in enumerate(models.dit.blocks)}
        units.update(sr=models.sr, decoder=models.decoder, encoder=models.encoder)
        off = cls(units, models.dit.device)
        for i, block in enumerate(models.dit.blocks):
            block.register_forward_pre_hook(lambda _m, _a, i=i: off.before_block(i))
            block.register_forward_hook(lambda _m, _a, _o, i=i: off.after_block(i))
        pipe.hooks.add(OffloadHook(off))
        return off

    @staticmethod
    def of(pipe: object) -> Offloader | None:
        """The offloader hooked into ``pipe``, if any."""
        hooks = getattr(pipe, "hooks", None)
        hook = hooks.find(OffloadHook) if hooks is not None else None
        return hook.off if hook is not None else None


# What each stage needs resident while it runs, and the unit fetched meanwhile.
_RESIDENT = {"sr": ("sr", "decoder"), "decode": ("decoder", "block0")}


class OffloadHook(PipelineHook):
    """The offloader's hold on a pipeline: the reference encoders and the decoder resident while
    a session opens; SR and the decoder resident while their stage runs, the next unit fetched
    meanwhile; and the A2V stage telling the offloader how many DiT forwards its chunk makes (its
    sampling steps, and the pass that fills the history after an N chunk) and whether it
    publishes, so that SR (or else the next chunk's first block) is fetched during the last."""

    def __init__(self, off: Offloader) -> None:
        self.off = off

    def opening(self) -> AbstractContextManager[None]:
        return self.off.holding("encoder", "decoder")

    @contextmanager
    def around(self, name: str, stage: object, inp: object) -> Iterator[None]:
        off = self.off
        if name == "a2v":
            kind = inp.plan.kind
            steps = inp.steps or (stage.steps if kind == "N" else min(stage.steps, stage.config.interp_steps))
            off.forwards_left = steps + (kind == "N")
            lo, hi = inp.plan.publish
            off.then = "sr" if hi > lo else "block0"
            try:
                yield
            finally:
                off.forwards_left = None
            return
        unit, after = _RESIDENT[name]
        off.ensure(unit)
        off.fetch(after)
        try:
            yield
        finally:
            off.release(unit)
