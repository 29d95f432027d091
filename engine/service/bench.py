"""``avatar bench --sessions N``: N concurrent sessions through one worker's engine core.

Every session gets its own speech (different seeds and avatars) up front; the core's
scheduler runs them as a worker would — the session furthest behind first, batched across
sessions unless ``--no-batch`` — as fast as the device allows, with frames discarded as soon
as they are published. A session's real-time factor above 1 means it could be served live. Reports the
aggregate fps, each session's real-time factor, per-batch latency, the mean batch size and the
engine's milliseconds per chunk and session by stage. ``--render`` says how the sessions' frames are
made (decoded, drawn, photo), ``--preset`` which preset they run.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from engine.batch import Render
from engine.presets import Preset
from engine.service.core import EngineCore
from engine.service.worker import calibration_spec, describe


@dataclass(frozen=True)
class SessionsBenchResult:
    config: str
    device: str
    threads: int
    sessions: int
    batched: bool
    seconds: float  # media seconds each session generated
    wall_s: float
    aggregate_fps: float
    session_rtf: list[float]
    min_session_rtf: float
    p50_chunk_ms: float
    p99_chunk_ms: float
    batch_mean: float
    batches: int
    render: str = Render.DECODED
    preset: str = Preset.QUALITY
    stage_ms: dict[str, float] = field(default_factory=dict)  # per chunk and session


def run_sessions_bench(pipe, sessions: int, batched: bool = True, seconds: float = 10.0,
                       render: Render = Render.DECODED, preset: str = Preset.QUALITY) -> SessionsBenchResult:
    """Run on a warmed-up pipeline (``engine.pipeline.warm_up``): one-time costs are not the figure."""
    import torch

    from engine.bench import speech_like

    info = describe(pipe)
    core = EngineCore(pipe, info, max_batch=sessions if batched else 1)
    names = [f"bench{i}" for i in range(sessions)]
    avatars = info.avatars or (None,)
    target = int(seconds * info.fps)
    pcm_seconds = seconds + 2 * info.frames_per_chunk / info.fps + 0.5
    spec = calibration_spec(preset, render)
    for i, name in enumerate(names):
        avatar = avatars[i % len(avatars)] if spec.photo is None else None  # a photo's driver: the default
        core.open(name, replace(spec, avatar=avatar, seed=i), core.slot_frames)
        core.push(name, 0, speech_like(pcm_seconds, info.sample_rate, seed=i))
    t0 = time.monotonic()
    for name in names:  # deadlines far off and alike: the session furthest behind goes first, batches fill
        core.set_origin(name, t0 + 3600.0)
    batch_s: list[float] = []
    done_at: dict[str, float] = {}
    while len(done_at) < sessions:
        outcome = core.step()
        if outcome is None:
            raise RuntimeError("the sessions ran out of audio before the bench target")
        batch_s.append(outcome.seconds)
        now = time.monotonic()
        for name, frames in outcome.frames.items():
            core.release(name, tuple(slot for slot, _ in frames))
            if name not in done_at and core.sessions[name].published >= target:
                done_at[name] = now
                core.close(name)
    wall = max(done_at.values()) - t0
    rtf = [round(seconds / (done_at[n] - t0), 3) for n in names]
    ms = np.array(batch_s) * 1000
    return SessionsBenchResult(
        config=info.config, device=str(pipe.device), threads=torch.get_num_threads(), sessions=sessions,
        batched=batched, seconds=seconds, wall_s=round(wall, 3),
        aggregate_fps=round(sessions * target / wall, 2), session_rtf=rtf, min_session_rtf=min(rtf),
        p50_chunk_ms=round(float(np.percentile(ms, 50)), 2), p99_chunk_ms=round(float(np.percentile(ms, 99)), 2),
        batch_mean=round(core.batch_mean, 3), batches=core.batches, render=str(render), preset=str(preset),
        stage_ms={k: round(v, 2) for k, v in core.costs.stage_ms().items()},
    )


def format_sessions(results: list[SessionsBenchResult]) -> str:
    head = f"{'sessions':>8} {'batched':>7} {'agg fps':>8} {'min rtf':>8} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6}"
    rows = [head]
    for r in results:
        rows.append(f"{r.sessions:>8} {'yes' if r.batched else 'no':>7} {r.aggregate_fps:>8.1f} "
                    f"{r.min_session_rtf:>8.2f} {r.p50_chunk_ms:>8.1f} {r.p99_chunk_ms:>8.1f} {r.batch_mean:>6.2f}")
    first = results[0] if results else None
    if first is not None:
        rows.insert(0, f"{first.config} on {first.device}, {first.threads} threads, {first.preset} preset, "
                       f"{first.render} frames, {first.seconds:g} s of speech per session")
    for r in results:
        rows.append(f"{r.sessions} session(s) ms per chunk and session: "
                    + ", ".join(f"{stage} {ms:.1f}" for stage, ms in r.stage_ms.items()))
    for batched in (True, False):
        held = [r.sessions for r in results if r.batched == batched and r.min_session_rtf >= 1.0]
        if any(r.batched == batched for r in results):
            rows.append(f"sessions at real time ({'batched' if batched else 'unbatched'}): "
                        f"{max(held) if held else 0} of those tried")
    return "\n".join(rows)


def write_sessions_json(results: list[SessionsBenchResult], path: str | Path) -> None:
    Path(path).write_text(json.dumps([asdict(r) for r in results], indent=2))
