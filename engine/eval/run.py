"""``avatar eval``: score a pipeline against the puppet renderer on held-out material.

For each clip (held-out identity + held-out speech) the renderer draws the ground truth
from what the speech says (its phones: ``Clip.truth``) and the pipeline generates from the
identity's neutral reference image; both videos are then scored with ``metrics``. The
same clips run again with I chunks off. A long run (``long_minutes`` of held-out speech,
streamed through one session) measures identity drift between its first and last window.
The command-line front end is ``engine.eval.cli``.

The puppet engine (``--config puppet``) is scored the same way as a baseline: it draws the
held-out identity itself (it takes no reference image) with its own seed, so its lip sync
is what a perfect engine scores, and its PSNR/SSIM what an engine scores whose blinks and
head motion are plausible but not the ground truth's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.eval import metrics
from engine.eval.envelope import loudness_envelope
from engine.eval.matched import matched_take
from engine.eval.material import Clip, make_clip, silence, utterance
from engine.eval.probe import measure_openness
from engine.frames import PublishedFrame
from engine.media.audio_io import save_png
from engine.pipeline import Pipeline
from engine.presets import DEFAULT_PRESET, Preset
from engine.puppet import FaceState, Identity, reference_image, render_video
from engine.puppet.engine import PuppetPipeline
from engine.puppet.mouth import phone_track
from engine.puppet.stream import face_track_from_mouth

# The same speech rendered again with another seed for its blinks and idle head motion: how far
# apart two equally right videos of one clip score (what no generated video can beat on average,
# since that motion is not in the audio).
OTHER_TAKE = 7919

# Pipelines scored on the clips: I chunks on and off at the schedule's chunk, the fast preset
# (its own chunk, no I chunks) where that differs, and the fast preset drawn (its frames drawn by
# the renderer at the motion read off the generated face: ``engine.stages.redraw``).
LABELS = ("interp", "no_interp", "fast", "drawn")
DRAWN = "drawn"
# Against the renderer's take of the clip, and against the take matched to the video's own
# blinks, gaze, brows and head pose (``engine.eval.matched``).
SHARPNESS = ("psnr", "ssim", "matched_psnr", "matched_ssim")

THRESHOLDS = {  # issue 4, "Evaluation"
    "lip_sync_r_min": 0.8,
    "lip_sync_max_abs_lag": 1,
    "identity_stability_min": 0.95,
    # A ratio near 1 means nothing if the video never looked like the reference: the
    # renderer scores ~0.98 and other identities below ~0.5.
    "appearance_first_min": 0.5,
    "seam_ratio_max": 1.2,
}


@dataclass
class Rendered:
    frames: np.ndarray
    chunks: list[str]
    seconds: float


def square_crop(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Centre-crop square renderer frames to the pipeline's aspect, as its reference encoder does."""
    s = frames.shape[1]
    y, x = (s - height) // 2, (s - width) // 2
    return frames[:, y : y + height, x : x + width]


def subject(pipeline: Pipeline | PuppetPipeline, identity: Identity, reference: np.ndarray,
            drawn: bool = False) -> dict[str, Any]:
    """Who to draw, as the pipeline takes it: learned engines see the identity only through
    its reference image, unless their frames are ``drawn`` by the renderer (it needs the identity);
    the puppet draws the identity itself."""
    if drawn:
        return {"avatar": identity, "drawn": True}
    return {"avatar": identity} if isinstance(pipeline, PuppetPipeline) else {"reference": reference}


def generate(pipeline: Pipeline | PuppetPipeline, clip: Clip, reference: np.ndarray, seed: int,
             drawn: bool = False) -> Rendered:
    t0 = time.perf_counter()
    out = list(pipeline.render(clip.pcm, **subject(pipeline, clip.identity, reference, drawn), seed=seed))
    return Rendered(np.stack([f.rgb for f in out]), [f.chunk for f in out], time.perf_counter() - t0)


def score_clip(frames: np.ndarray, chunks: list[str], truth: np.ndarray, gt_open: np.ndarray,
               reference: np.ndarray) -> dict[str, Any]:
    """Every per-clip metric of one generated video against its ground truth."""
    n = min(len(frames), len(truth))
    frames, chunks, truth, gt_open = frames[:n], chunks[:n], truth[:n], gt_open[:n]
    measured = measure_openness(frames, reference)
    return {
        "measured_openness": measured,
        "lip_sync": metrics.lip_sync_series(measured, gt_open),
        "seam_ratio": metrics.seam_ratio(frames, chunks) if len(set(chunks)) > 1 else None,
        **sharpness(frames, truth),
        "appearance": metrics.appearance_similarity(frames, reference),
    }


def pooled_lip_sync(pairs: list[tuple[np.ndarray, np.ndarray]], max_lag: int = metrics.MAX_LAG) -> dict[str, float]:
    """Mean r over clips at each lag; the best lag is the one with the highest mean."""
    lags = range(-max_lag, max_lag + 1)
    mean_r = {lag: float(np.mean([metrics.lagged_pearson(m, t, lag) for m, t in pairs])) for lag in lags}
    best = max(mean_r, key=lambda k: (mean_r[k], -abs(k)))
    return {"pearson_r": mean_r[0], "best_lag": best, "r_at_best_lag": mean_r[best]}


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def contact_sheet(truth: np.ndarray, generated: np.ndarray, gt_open: np.ndarray, count: int = 6) -> np.ndarray:
    """Ground truth (top row) over generated frames (bottom row) at ``count`` moments spread
    from the most closed to the most open mouth: what the README shows."""
    n = min(len(truth), len(generated))
    order = np.argsort(gt_open[:n], kind="stable")
    picks = sorted(order[np.linspace(0, n - 1, count).round().astype(int)])
    return np.concatenate([np.concatenate(list(v[picks]), axis=1) for v in (truth, generated)], axis=0)


def redrawn(frames: np.ndarray, identity: Identity, reference: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) frames of ``identity`` redrawn by its renderer at the motion read off each."""
    from engine.puppet.rig import PuppetRig
    from engine.stages.redraw import Redraw, RedrawState

    published = [PublishedFrame(i, 25, f, np.zeros(0, np.float32), 16000, "N") for i, f in enumerate(frames)]
    (made,), _ = Redraw()([published], [RedrawState(PuppetRig(identity, frames.shape[1]), reference)])
    return np.stack([f.rgb for f in made])


def evaluate_clips(pipelines: dict[str, Pipeline | PuppetPipeline], clips: list[Clip], seed: int = 0,
                   log: Callable[[str], None] = print, sheet: Path | None = None) -> dict[str, Any]:
    """Score each pipeline (by label, e.g. interp / no_interp) on every clip against the renderer;
    the one labelled ``DRAWN`` has its frames drawn by the renderer at the generated motion."""
    first = next(iter(pipelines.values()))
    h, w = first.frame_size
    size = max(h, w)
    results: dict[str, Any] = {label: {"clips": []} for label in pipelines}
    pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {label: [] for label in pipelines}
    envelope_pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {label: [] for label in pipelines}
    probe_pairs: list[tuple[np.ndarray, np.ndarray]] = []
    learned = isinstance(first, Pipeline)
    ceiling_pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"autoencoder": [], "through_sr": []}
    if learned and DRAWN in pipelines:
        ceiling_pairs[DRAWN] = []
    ceiling_scores: dict[str, list[dict[str, float]]] = {key: [] for key in ceiling_pairs}
    other_take: list[dict[str, float]] = []
    for k, clip in enumerate(clips):
        mouth = clip.truth(first.fps)
        envelope = loudness_envelope(clip.pcm, clip.sample_rate, first.fps)
        states = face_track_from_mouth(mouth, seed=clip.identity_seed)
        truth = square_crop(render_video(clip.identity, states, size), h, w)
        gt_open = np.array([s.openness for s in states], dtype=np.float32)
        reference = reference_image(clip.identity, size)
        probe_pairs.append((measure_openness(truth, reference), gt_open))
        other = face_track_from_mouth(mouth, seed=clip.identity_seed + OTHER_TAKE)
        other_frames = square_crop(render_video(clip.identity, other, size), h, w)
        other_take.append({**sharpness(other_frames, truth),
                           **matched_sharpness(other_frames, states, clip.identity, reference)})
        if learned:
            rebuilt_all = list(first.reconstruct(truth, reference))
            if DRAWN in ceiling_pairs:
                rebuilt_all.append(redrawn(truth, clip.identity, reference))
            for key, rebuilt in zip(ceiling_pairs, rebuilt_all, strict=True):
                ceiling_pairs[key].append((measure_openness(rebuilt, reference), gt_open[: len(rebuilt)]))
                ceiling_scores[key].append(sharpness(rebuilt, truth))
        for label, pipe in pipelines.items():
            gen = generate(pipe, clip, reference, seed + k, drawn=label == DRAWN)
            if sheet is not None and k == 0 and label == next(iter(pipelines)):
                save_png(sheet, contact_sheet(truth, gen.frames, gt_open))
            scores = score_clip(gen.frames, gen.chunks, truth, gt_open, reference)
            scores.update(matched_sharpness(gen.frames, states, clip.identity, reference))
            measured = scores.pop("measured_openness")
            pairs[label].append((measured, gt_open[: len(measured)]))
            envelope_pairs[label].append((measured, envelope[: len(measured)]))
            scores.update(name=clip.name, identity_seed=clip.identity_seed, seconds=round(clip.seconds, 2),
                          speech=clip.description, real_time_factor=clip.seconds / gen.seconds)
            results[label]["clips"].append(scores)
            ls = scores["lip_sync"]
            log(f"  {label:<9} {clip.name}: r={ls['pearson_r']:.3f} lag={ls['best_lag']:+d} "
                f"seam={_fmt(scores['seam_ratio'])} psnr={scores['psnr']:.2f} ssim={scores['ssim']:.3f} "
                f"matched psnr={_fmt(scores['matched_psnr'], '.2f')} ssim={_fmt(scores['matched_ssim'])}")
    for label, res in results.items():
        clips_out = res["clips"]
        res["lip_sync"] = pooled_lip_sync(pairs[label])
        res["lip_sync_envelope"] = pooled_lip_sync(envelope_pairs[label])  # secondary: against loudness
        for key in ("seam_ratio", *SHARPNESS, "appearance", "real_time_factor"):
            res[key] = _mean([c[key] for c in clips_out])
    results["probe_on_ground_truth"] = pooled_lip_sync(probe_pairs)
    results["other_take"] = mean_sharpness(other_take)
    if learned:
        results["ceiling"] = {
            key: {**pooled_lip_sync(p), "clips_r": [metrics.pearson(m, t) for m, t in p],
                  **mean_sharpness(ceiling_scores[key])}
            for key, p in ceiling_pairs.items()
        }
    return results


def sharpness(frames: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """PSNR and SSIM of ``frames`` against the first ``len(frames)`` of ``truth``."""
    truth = truth[: len(frames)]
    return {"psnr": metrics.psnr(frames, truth), "ssim": metrics.ssim(frames, truth)}


def matched_sharpness(frames: np.ndarray, states: list[FaceState], identity: Identity,
                      reference: np.ndarray) -> dict[str, float | None]:
    """PSNR and SSIM of square ``frames`` against their matched take (``engine.eval.matched``):
    the ground truth's mouth, the video's own blinks, gaze, brows and head pose."""
    if frames.shape[1] != frames.shape[2]:
        return {"matched_psnr": None, "matched_ssim": None}
    scores = sharpness(frames, matched_take(frames, states, identity, reference))
    return {f"matched_{k}": v for k, v in scores.items()}


def mean_sharpness(scores: list[dict[str, float | None]]) -> dict[str, float | None]:
    return {key: _mean([s[key] for s in scores]) for key in SHARPNESS if key in scores[0]}


def long_audio(minutes: float, sample_rate: int, fps: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Held-out speech with pauses, piece by piece, each with its ground-truth openness.

    Pieces are whole video frames long and end in silence, so per-piece openness equals
    that of the whole stream and nothing of the hour is ever held at once. A pool of
    eight utterances is synthesised as needed and then cycled.
    """
    spf = sample_rate // fps
    pool: list[tuple[np.ndarray, np.ndarray]] = []
    total = round(minutes * 60 * fps) * spf
    done, k = 0, 0
    while done < total:
        if k < 8:
            said, _ = utterance(100 + k + 7 * seed, sample_rate)
            piece = np.concatenate([said.pcm, silence(0.5 + 0.25 * (k % 3), sample_rate)])
            piece = np.concatenate([piece, np.zeros(-len(piece) % spf, dtype=np.float32)])
            pool.append((piece, phone_track(said.phones, piece, sample_rate, fps).openness))
        piece, gt = pool[k % len(pool)]
        take = min(len(piece), total - done)
        yield piece[:take], gt[: take // spf]
        done += take
        k += 1


class _WindowScorer:
    """Scores frames of a long run as they are published, keeping only per-frame numbers."""

    def __init__(self, reference: np.ndarray, window: int, last_start: int) -> None:
        self.reference, self.window, self.last_start = reference, window, last_start
        self.first: list[np.ndarray] = []
        self.last: list[np.ndarray] = []
        self.openness: list[np.ndarray] = []
        self.frames = 0

    def __call__(self, frames: list[PublishedFrame]) -> int:
        if not frames:
            return 0
        video = np.stack([f.rgb for f in frames])
        idx = np.array([f.index for f in frames])
        first, last = idx < self.window, idx >= self.last_start
        if first.any():
            self.first.append(metrics.appearance_scores(video[first], self.reference))
        if last.any():
            self.last.append(metrics.appearance_scores(video[last], self.reference))
            self.openness.append(measure_openness(video[last], self.reference))
        self.frames += len(frames)
        return len(frames)


def evaluate_long(pipeline: Pipeline | PuppetPipeline, clip: Clip, minutes: float, seed: int = 0,
                  progress: bool = True) -> dict[str, Any]:
    """Stream ``minutes`` of speech through one session; score the first and last windows
    (one minute each, or a quarter of the run if it is shorter than four minutes)."""
    from tqdm import tqdm

    fps, spf = pipeline.fps, pipeline.config.samples_per_frame
    h, w = pipeline.frame_size
    reference = reference_image(clip.identity, max(h, w))
    total_frames = round(minutes * 60 * fps)
    window = max(min(60 * fps, total_frames // 4), 1)
    scorer = _WindowScorer(reference, window, total_frames - window)
    truth: list[np.ndarray] = []
    t0 = time.perf_counter()
    session = pipeline.open_session(**subject(pipeline, clip.identity, reference), seed=seed)
    fed = 0
    with tqdm(total=total_frames, unit="frame", desc="long run", disable=not progress) as bar:
        for pcm, gt in long_audio(minutes, pipeline.sample_rate, fps, seed):
            frame0 = fed // spf
            truth.append(gt[np.arange(frame0, frame0 + len(gt)) >= scorer.last_start])
            session.feed(pcm)
            fed += len(pcm)
            while session.ready():
                bar.update(scorer(session.step()))
        session.close_input()
        while not session.finished:
            bar.update(scorer(session.step()))
    wall = time.perf_counter() - t0
    first, last = np.concatenate(scorer.first), np.concatenate(scorer.last)
    measured, gt_last = np.concatenate(scorer.openness), np.concatenate(truth)
    n = min(len(measured), len(gt_last))
    sync = metrics.lip_sync_series(measured[:n], gt_last[:n]) if n >= metrics.min_lip_sync_frames() else None
    return {
        "minutes": minutes,
        "frames": scorer.frames,
        "window_frames": window,
        "identity_seed": clip.identity_seed,
        "appearance_first": float(first.mean()),
        "appearance_last": float(last.mean()),
        "identity_stability": metrics.stability_ratio(first, last),
        "lip_sync_last_window": sync,
        "real_time_factor": scorer.frames / fps / wall,
        "held_bytes_end": int(session.nbytes()),
    }


def evaluate(pipeline: Pipeline | PuppetPipeline, clips: int = 4, long_minutes: float = 60.0, seed: int = 0,
             no_interp: Pipeline | PuppetPipeline | None = None, progress: bool = True,
             sheet: Path | None = None, long_preset: str = DEFAULT_PRESET) -> dict[str, Any]:
    """All of issue 4's evaluation for one pipeline, as a JSON-able dict (see ``format_table``).

    ``no_interp`` defaults to the same models with I chunks switched off; a pipeline without
    I chunks (the puppet's config has none) is scored once, as ``no_interp``.
    ``long_minutes=0`` skips the long run, which streams through ``long_preset`` (by default the
    one sessions get).
    """
    log = print if progress else (lambda _: None)
    pipes: dict[str, Pipeline | PuppetPipeline]
    if pipeline.config.schedule.interp:
        pipes = {"interp": pipeline, "no_interp": no_interp or pipeline.with_interp(False)}
    else:
        pipes = {"no_interp": pipeline}
    cfg = pipeline.config
    if cfg.fast_schedule(pipeline.steps) != (cfg.schedule.chunk, pipeline.steps):
        pipes["fast"] = pipeline.preset(Preset.FAST)  # the low-latency schedule sessions get by default
    if isinstance(pipeline, Pipeline):
        pipes[DRAWN] = pipeline.preset(Preset.FAST)
    test_clips = [make_clip(i, pipeline.sample_rate, seed) for i in range(clips)]
    log(f"eval: {clips} held-out clips ({sum(c.seconds for c in test_clips):.1f} s of speech)")
    result: dict[str, Any] = {
        "config": pipeline.config.name,
        "device": pipeline.device,
        "steps": pipeline.steps,
        "guidance": pipeline.config.audio_guidance,
        "deblock": list(pipeline.config.deblock),
        "frame_size": list(pipeline.frame_size),
        "weights": list(pipeline.weights_loaded),
        "seed": seed,
        "thresholds": THRESHOLDS,
    }
    if "fast" in pipes:
        result["fast_preset"] = {"chunk": pipes["fast"].config.schedule.chunk, "steps": pipes["fast"].steps}
    result.update(evaluate_clips(pipes, test_clips, seed, log, sheet))
    if long_minutes > 0:
        long_clip = make_clip(clips, pipeline.sample_rate, seed)
        long_pipe = pipeline.preset(long_preset)
        log(f"eval: long run, {long_minutes:g} min through one {long_preset} session")
        result["long"] = {**evaluate_long(long_pipe, long_clip, long_minutes, seed, progress), "preset": long_preset,
                          "chunk": long_pipe.config.schedule.chunk, "steps": long_pipe.steps}
    result["passes"] = verdicts(result)
    return jsonable(result)


def verdicts(result: dict[str, Any]) -> dict[str, bool | None]:
    """Each threshold of the issue, checked on the main (I chunks on) pipeline."""
    main = result.get("interp") or result["no_interp"]
    ls = main["lip_sync"]
    out: dict[str, bool | None] = {
        "lip_sync_r": ls["pearson_r"] >= THRESHOLDS["lip_sync_r_min"],
        "lip_sync_lag": abs(ls["best_lag"]) <= THRESHOLDS["lip_sync_max_abs_lag"],
        "seam_ratio": None if main["seam_ratio"] is None else main["seam_ratio"] <= THRESHOLDS["seam_ratio_max"],
        "identity_stability": None,
    }
    if "long" in result:
        long = result["long"]
        out["identity_stability"] = (long["identity_stability"] >= THRESHOLDS["identity_stability_min"]
                                     and long["appearance_first"] >= THRESHOLDS["appearance_first_min"])
    return out


def card_entry(result: dict[str, Any]) -> dict[str, Any]:
    """The figures a model card keeps from one ``evaluate`` result."""
    keys = ("lip_sync", "lip_sync_envelope", "seam_ratio", *SHARPNESS, "appearance", "real_time_factor")
    entry: dict[str, Any] = {
        label: {k: result[label][k] for k in keys} for label in LABELS if label in result
    }
    entry["clips"] = len(next(v for k, v in result.items() if k in LABELS)["clips"])
    entry["settings"] = {k: result[k] for k in ("steps", "guidance", "deblock", "fast_preset") if k in result}
    for key in ("ceiling", "other_take"):
        if key in result:
            entry[key] = result[key]
    if "long" in result:
        entry["long"] = {k: v for k, v in result["long"].items() if k != "identity_seed"}
    entry["passes"] = result["passes"]
    return entry


def update_card(path: Path, result: dict[str, Any], command: str) -> None:
    """Merge ``result`` into ``model_card.json``: clip scores and the long run are kept apart,
    so a short run does not erase the figures of an earlier hour-long one, and clip scores
    over fewer clips than those recorded do not replace them."""
    import json

    card = json.loads(path.read_text()) if path.exists() else {}
    evaluation = card.setdefault("evaluation", {})
    entry = card_entry(result)
    if "long" in entry:
        evaluation["long"] = {**entry.pop("long"), "settings": entry["settings"], "command": command}
    if entry["clips"] >= evaluation.get("clips", {}).get("clips", 0):
        evaluation["clips"] = {**entry, "command": command}
    path.write_text(json.dumps(card, indent=2) + "\n")


def jsonable(x: Any) -> Any:
    """Plain JSON types; non-finite floats become None (strict JSON has no inf/nan)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def format_table(result: dict[str, Any]) -> str:
    """A fixed-width summary of ``evaluate``'s result."""
    labels = [k for k in LABELS if k in result]
    rows = [("metric", *labels, "target")]
    pick: list[tuple[str, Callable[[dict[str, Any]], str], str]] = [
        ("lip sync r vs phones (lag 0)", lambda r: _fmt(r["lip_sync"]["pearson_r"]), ">= 0.80"),
        ("best lag (frames)", lambda r: f"{r['lip_sync']['best_lag']:+d}", "|lag| <= 1"),
        ("r at best lag", lambda r: _fmt(r["lip_sync"]["r_at_best_lag"]), ""),
        ("r vs loudness envelope (lag 0)", lambda r: _fmt(r.get("lip_sync_envelope", {}).get("pearson_r")), "report"),
        ("seam ratio", lambda r: _fmt(r["seam_ratio"]), "<= 1.20"),
        ("PSNR vs renderer (dB)", lambda r: _fmt(r["psnr"], ".2f"), "report"),
        ("SSIM vs renderer", lambda r: _fmt(r["ssim"]), "report"),
        ("PSNR vs matched take (dB)", lambda r: _fmt(r["matched_psnr"], ".2f"), ">= 30"),
        ("SSIM vs matched take", lambda r: _fmt(r["matched_ssim"]), ">= 0.95"),
        ("similarity to reference", lambda r: _fmt(r["appearance"]), "report"),
        ("real-time factor", lambda r: _fmt(r["real_time_factor"], ".2f"), "report"),
    ]
    for name, get, target in pick:
        rows.append((name, *(get(result[k]) for k in labels), target))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(wd) for c, wd in zip(row, widths, strict=True)) for row in rows]
    probe = result.get("probe_on_ground_truth")
    if probe:
        lines.append(f"probe on the renderer's own frames: r={probe['pearson_r']:.3f} lag={probe['best_lag']:+d}")
    ceiling = result.get("ceiling")
    if ceiling:
        names = {"autoencoder": "through the autoencoder", "through_sr": "through it via super-resolution",
                 DRAWN: "redrawn at the motion read off them"}
        lines.append("ceiling, the renderer's own frames: " + "; ".join(
            f"{names.get(k, k)} r={c['pearson_r']:.3f} "
            f"(clips {', '.join(f'{r:.2f}' for r in c['clips_r'])}), PSNR {_fmt(c.get('psnr'), '.2f')} dB, "
            f"SSIM {_fmt(c.get('ssim'))}" for k, c in ceiling.items()))
    other = result.get("other_take")
    if other:
        lines.append("another take of the ground truth (other blinks and idle motion): "
                     f"PSNR {_fmt(other['psnr'], '.2f')} dB, SSIM {_fmt(other['ssim'])}; against its matched take "
                     f"PSNR {_fmt(other.get('matched_psnr'), '.2f')} dB, SSIM {_fmt(other.get('matched_ssim'))}")
    long = result.get("long")
    if long:
        lines.append(
            f"long run {long['minutes']:g} min ({long.get('preset', 'quality')}): "
            f"similarity first {long['appearance_first']:.3f}, "
            f"last {long['appearance_last']:.3f}, stability {long['identity_stability']:.3f} (>= 0.95); "
            f"lip sync r in last window {_fmt((long['lip_sync_last_window'] or {}).get('pearson_r'))}; "
            f"real-time factor {long['real_time_factor']:.2f}"
        )
    passes = result.get("passes", {})
    if passes:
        lines.append("passes: " + ", ".join(f"{k}={'-' if v is None else ('yes' if v else 'NO')}"
                                            for k, v in passes.items()))
    return "\n".join(lines)
