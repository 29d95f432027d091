"""``avatar bench`` of an engine spread over devices (``--sequence-parallel``, ``--pipeline-parallel``,
``--shard``, ``--offload``, ``--decoder-device``): the usual figures (fps, first frame, time per
stage), plus the ranks, peak memory on every device, model-switch waits (offload), stage
boundaries and block times (pipeline stages), and how far its output is from the one-device
run of the same audio and seed (``max_abs_diff``: the generated latents; ``max_frame_diff``:
published RGB levels)."""

from __future__ import annotations

import json
import resource
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from engine.bench import BenchResult, format_result, run_bench
from engine.hooks import PipelineHook
from engine.parallel.build import build_pipeline
from engine.parallel.offload import Offloader
from engine.parallel.pipeline_stages import block_seconds, stage_boundaries
from engine.parallel.plan import ParallelPlan
from engine.pipeline import Pipeline


@dataclass
class ParallelFigures:
    plan: str
    world_size: int
    max_abs_diff: float | None  # generated latents against one device, fp32; None: not compared
    max_frame_diff: int | None  # published RGB against one device, in levels of 255
    single_fps: float | None
    single_first_frame_s: float | None
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)  # "rank r device" -> bytes
    switch_ms: dict[str, float] = field(default_factory=dict)  # offload: mean wait per stage boundary
    stage_boundaries: tuple[int, ...] | None = None  # pipeline stages, as balanced before the run
    rank_block_ms: list[float] = field(default_factory=list)  # pipeline stages: one forward's blocks, per rank
    note: str = ""


class Outputs(PipelineHook):
    """Keeps what a pipeline's A2V and decode stages produce, in call order."""

    def __init__(self, pipe: object) -> None:
        local = getattr(pipe, "local", pipe)
        self.latents: list[torch.Tensor] = []
        self.frames: list[torch.Tensor] = []
        local.hooks.add(self)

    def made(self, name: str, out: object) -> None:
        if name == "a2v":
            self.latents.append(out.latents.clone())
        elif name == "decode":
            self.frames.extend(torch.from_numpy(f.rgb.astype("int16")) for row in out.frames for f in row)


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return float("inf")
    return max((float((x.float() - y.float()).abs().max()) for x, y in zip(a, b, strict=True)), default=0.0)


def rank_memory(context: object) -> dict[str, int]:
    """(On every rank) peak memory of what this rank used: each CUDA device, or the process on a CPU."""
    pipe = context.pipe
    devices = {str(pipe.models.dit.device), str(pipe.models.decoder.device)}
    out = {}
    for device in sorted(devices):
        if device.startswith("cuda"):
            out[f"rank {context.rank} {device}"] = torch.cuda.max_memory_allocated(device)
        else:
            out[f"rank {context.rank} cpu (peak RSS)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def _stage_figures(pipe: object, plan: ParallelPlan, figures: ParallelFigures) -> None:
    if plan.pipeline > 1:
        per_rank = pipe.call(block_seconds)
        figures.rank_block_ms = [round(1000 * sum(t for t in times if t is not None), 3) for times in per_rank]


def run_parallel_bench(plan: ParallelPlan, build: dict, device: str, seconds: float | None, chunks: int | None,
                       checkpoints: tuple[int, ...], single_threads: int | None,
                       compare: bool = True) -> tuple[BenchResult, ParallelFigures]:
    """Bench the engine ``plan`` builds (``build``: ``Pipeline.from_config`` keywords), then, with
    ``compare``, the one-device engine on the same audio and seed."""
    pipe = build_pipeline(plan, device=device, **build)
    figures = ParallelFigures(plan.describe(), plan.world_size, None, None, None, None)
    try:
        if plan.pipeline > 1:
            figures.stage_boundaries = pipe.call(stage_boundaries)[0]
        offload = Offloader.of(pipe)
        if offload is not None:
            offload.measure = True
        outputs = Outputs(pipe)
        result = run_bench(pipe, seconds=seconds, chunks=chunks, checkpoints=checkpoints, progress=False)
        figures.peak_memory_bytes = (
            {k: v for r in pipe.call(rank_memory) for k, v in r.items()} if plan.world_size > 1
            else rank_memory(_Local(pipe)))
        if offload is not None:
            figures.switch_ms = offload.switch_ms()
        _stage_figures(pipe, plan, figures)
    finally:
        close = getattr(pipe, "close", None)
        if close is not None:
            close()
    if not compare:
        figures.note = "not compared with one device"
        return result, figures
    single = Pipeline.from_config(device=device, **{**build, "threads": single_threads})
    reference = Outputs(single)
    alone = run_bench(single, seconds=seconds, chunks=chunks, progress=False)
    figures.single_fps, figures.single_first_frame_s = alone.fps, alone.first_frame_s
    figures.max_abs_diff = _max_diff(outputs.latents, reference.latents)
    figures.max_frame_diff = int(_max_diff(outputs.frames, reference.frames))
    return result, figures


@dataclass
class _Local:
    """What ``rank_memory`` reads of a rank, for an engine in this process alone."""

    pipe: object
    rank: int = 0


def format_parallel(result: BenchResult, figures: ParallelFigures) -> str:
    mb = 1 / 2**20
    rows = [("parallel", f"{figures.plan} ({figures.world_size} rank{'s' * (figures.world_size > 1)})")]
    if figures.max_abs_diff is not None:
        rows.append(("max |diff| vs one device", f"latents {figures.max_abs_diff:.2e}, frames "
                                                 f"{figures.max_frame_diff} levels"))
        rows.append(("one device", f"{figures.single_fps:.1f} fps, first frame {figures.single_first_frame_s:.3f} s"))
    for name, peak in figures.peak_memory_bytes.items():
        rows.append((f"peak memory {name}", f"{peak * mb:.0f} MiB"))
    if figures.switch_ms:
        rows.append(("model switch ms", ", ".join(f"{k} {v:.3f}" for k, v in figures.switch_ms.items())))
    if figures.stage_boundaries is not None:
        rows.append(("stage boundaries", f"{figures.stage_boundaries}, block ms per rank {figures.rank_block_ms}"))
    if figures.note:
        rows.append(("note", figures.note))
    width = max(len(k) for k, _ in rows)
    return format_result(result) + "\n" + "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def write_parallel_json(result: BenchResult, figures: ParallelFigures, path: str | Path) -> None:
    Path(path).write_text(json.dumps({**asdict(result), **asdict(figures)}, indent=2))
