"""``avatar bench``: time to first frame, generated fps, real-time factor, time per stage
per chunk, held memory and process RSS. Figures are measured, never asserted in tests."""

from __future__ import annotations

import json
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.pipeline import Pipeline
from engine.puppet.engine import PuppetPipeline


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def speech_like(seconds: float, sample_rate: int, seed: int = 0) -> np.ndarray:
    """Deterministic voiced syllables with pauses: harmonics, formant-ish sweeps, syllable envelope."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate)
    t = np.arange(n) / sample_rate
    f0 = 120 + 25 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    syllables = np.clip(np.sin(2 * np.pi * 3.5 * t), 0, None) ** 0.6
    pauses = (np.sin(2 * np.pi * 0.23 * t + rng.uniform(0, 6)) > -0.6).astype(np.float32)
    audio = 0.25 * voice * syllables * pauses + 0.003 * rng.standard_normal(n)
    return audio.astype(np.float32)


@dataclass
class Checkpoint:
    chunks: int
    frames: int
    fps: float
    held_bytes: int
    rss_bytes: int
    gpu_peak_bytes: int | None


@dataclass(frozen=True)
class BenchResult:
    config: str
    device: str
    size: str
    steps: int
    guidance: float
    interp: bool
    threads: int
    audio_seconds: float
    frames: int
    chunks: int
    wall_s: float
    reference_s: float
    first_frame_s: float
    first_frame_live_s: float
    fps: float
    rtf: float
    stage_ms: dict[str, dict[str, float]]
    held_bytes_start: int
    held_bytes_end: int
    rss_start: int
    rss_end: int
    checkpoints: list[Checkpoint] = field(default_factory=list)
    hygiene: list[str] = field(default_factory=list)  # engine.parallel.hygiene features applied (CUDA)


def run_bench(pipe: Pipeline | PuppetPipeline, seconds: float | None = None, chunks: int | None = None,
              checkpoints: tuple[int, ...] = (), progress: bool = True) -> BenchResult:
    cfg = pipe.config
    if chunks is not None:
        frames_needed = chunks * pipe.frames_per_chunk
        seconds = frames_needed / cfg.fps + 0.2
    seconds = seconds or 60.0
    pcm = speech_like(seconds, pipe.sample_rate)
    cuda = pipe.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    t_start = time.perf_counter()
    session = pipe.open_session()
    sync()
    reference_s = time.perf_counter() - t_start
    session.feed(pcm)
    session.close_input()
    stage: dict[str, dict[str, list[float]]] = {"N": {}, "I": {}}
    frames = 0
    first_frame = None
    first_live = None
    held_start = rss_start = None
    points: list[Checkpoint] = []
    want = sorted(checkpoints)
    n_audio_needed = pipe.first_chunk_samples / pipe.sample_rate
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=int(seconds * cfg.fps), unit="frame", desc=f"bench {cfg.name}", leave=False)
    while not session.finished:
        out = session.step()
        sync()
        kind = session.last_chunk[:1] or "N"
        for name, secs in session.timings.items():
            stage.setdefault(kind, {}).setdefault(name, []).append(secs * 1000)
        if out and first_frame is None:
            first_frame = time.perf_counter() - t_start
            first_live = n_audio_needed + (first_frame - reference_s)
            held_start, rss_start = session.nbytes(), rss_bytes()
        frames += len(out)
        if bar is not None:
            bar.update(len(out))
        done = session.chunks_run
        if want and done >= want[0] and out:
            want.pop(0)
            elapsed = time.perf_counter() - t_start
            points.append(Checkpoint(done, frames, frames / elapsed, session.nbytes(), rss_bytes(),
                                     torch.cuda.max_memory_allocated() if cuda else None))
    wall = time.perf_counter() - t_start
    if bar is not None:
        bar.close()
    fps = frames / max(wall - reference_s, 1e-9)
    h, w = pipe.frame_size
    return BenchResult(
        config=cfg.name, device=pipe.device, size=f"{w}x{h}", steps=pipe.steps, guidance=cfg.audio_guidance,
        interp=cfg.schedule.interp,
        threads=torch.get_num_threads(), audio_seconds=round(seconds, 3), frames=frames,
        chunks=session.chunks_run, wall_s=wall, reference_s=reference_s,
        first_frame_s=first_frame or float("nan"), first_frame_live_s=first_live or float("nan"),
        fps=fps, rtf=fps / cfg.fps,
        stage_ms={k: {n: float(np.mean(v)) for n, v in d.items()} for k, d in stage.items() if d},
        held_bytes_start=held_start or 0, held_bytes_end=session.nbytes(), rss_start=rss_start or 0,
        rss_end=rss_bytes(), checkpoints=points,
    )


def format_result(r: BenchResult) -> str:
    mb = 1 / 2**20
    rows = [
        ("config", f"{r.config} ({r.size}, {r.steps} steps, guidance {r.guidance:g}, "
                   f"interp {'on' if r.interp else 'off'})"),
        ("device / threads", f"{r.device} / {r.threads}" + (f", hygiene {','.join(r.hygiene)}" if r.hygiene else "")),
        ("audio", f"{r.audio_seconds:.1f} s -> {r.frames} frames, {r.chunks} chunks"),
        ("reference encode", f"{r.reference_s * 1000:.0f} ms"),
        ("first frame (audio ready)", f"{r.first_frame_s:.3f} s"),
        ("first frame (live, incl. audio wait)", f"{r.first_frame_live_s:.3f} s"),
        ("generated fps", f"{r.fps:.1f}"),
        ("real-time factor", f"{r.rtf:.2f}"),
    ]
    for kind, stages in r.stage_ms.items():
        rows.append((f"{kind} chunk ms/stage", ", ".join(f"{k} {v:.0f}" for k, v in stages.items())))
    rows += [
        ("held state start/end", f"{r.held_bytes_start * mb:.2f} / {r.held_bytes_end * mb:.2f} MiB"),
        ("process RSS start/end", f"{r.rss_start * mb:.0f} / {r.rss_end * mb:.0f} MiB"),
    ]
    for p in r.checkpoints:
        gpu = f", GPU peak {p.gpu_peak_bytes * mb:.0f} MiB" if p.gpu_peak_bytes is not None else ""
        rows.append((f"after {p.chunks} chunks", f"{p.fps:.1f} fps, held {p.held_bytes * mb:.2f} MiB, "
                                                 f"RSS {p.rss_bytes * mb:.0f} MiB{gpu}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def write_json(result: BenchResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps(asdict(result), indent=2))
