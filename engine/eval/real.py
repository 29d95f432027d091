"""``avatar eval --real``: lip sync judged against real mouths, not against the audio.

Each clip is a real person talking with their own voice (public example clips of
talking-head projects, ``real_mouths/SOURCES.md``; evaluation only, never training). The
face mesh reads the inner-lip gap (over the interocular distance) on every real frame. The
clip's most closed frame is the photo of a photo avatar, the clip's audio drives it, and the
mesh reads the same gap on the generated frames. Per clip:

* ``avatar``: r of the generated lip gap against the real one, at the best lag within
  ``MAX_LAG`` frames;
* ``envelope``: the same for the audio's loudness envelope (``engine.eval.envelope``): the
  bar, since a mouth that only follows loudness scores this;
* ``heard``: the same for the mouth tracker alone (``engine.puppet.mouth``: the speech encoder
  and its mouth head, no DiT, no face);
* ``closures``: the share of the real mouth's short closures (the lips meeting mid-speech, as
  on p/b/m) in which the avatar's lips also close;
* ``range``: the generated opening's range (5th to 95th percentile) over the real one's;
* ``drawn`` and ``puppet``: r and closures of the bundled drawn avatar (``engine.avatars``) driven
  by the same audio, its frames drawn by the model's renderer with the heard mouth (a drawn
  session) or by the procedural engine (``engine.puppet``), its opening read off the frames by
  the openness probe (``engine.eval.probe``; the face mesh reads photographs, not drawings).

Clips named in ``HELD_OUT`` are kept out of any tuning: their figures are reported apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from engine.eval import metrics
from engine.eval.envelope import loudness_envelope
from engine.eval.mesh import MeshReader
from engine.eval.photo import lip_openness, render_photo
from engine.eval.probe import measure_openness
from engine.face.checks import find_face
from engine.face.crop import crop_box
from engine.media.audio_io import load_audio, save_png
from engine.photo.avatar import photo_avatar
from engine.pipeline import Pipeline
from engine.puppet import Identity, openness_series
from engine.puppet.draw import reference_image
from engine.puppet.engine import PuppetPipeline

REAL_DIR = Path(__file__).resolve().parent / "real_mouths"
HELD_OUT = ("katiehill", "retalk5", "radio2", "radio34", "menendez", "markey", "obama", "mead030", "retalkmin",
            "retalkdocu5")  # speakers never looked at while tuning
MAX_LAG = 4  # frames either way
CLOSED_SHARE = 0.15  # of a series' range above its minimum: lips closed ...
CLOSED_GAP = 0.045  # ... and never wider than this (inner-lip gap over interocular; real lips meet at 0.01-0.03)
CLOSURE_MAX_FRAMES = 12  # real closures longer than this (half a second) are pauses, not closures
CLOSURE_SLACK = 1  # frames either side of a real closure the avatar may close in


@dataclass(frozen=True)
class RealClip:
    """A real person talking: frames at ``fps`` and their audio."""

    name: str
    frames: np.ndarray  # (T, H, W, 3) uint8
    pcm: np.ndarray  # mono float32 at ``sample_rate``
    sample_rate: int
    fps: int

    @property
    def seconds(self) -> float:
        return len(self.frames) / self.fps


def load_real_clip(path: Path, sample_rate: int = 16000, fps: int = 25) -> RealClip:
    """A video file's frames resampled to ``fps`` (nearest in time) and its audio to ``sample_rate``."""
    with av.open(str(path)) as container:
        decoded = [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    times = np.array([t for t, _ in decoded])
    pcm = load_audio(path, sample_rate)
    count = int(min(times[-1] + (times[1] - times[0]), pcm.size / sample_rate) * fps)
    picks = np.abs(times[None, :] - np.arange(count)[:, None] / fps).argmin(axis=1)
    frames = np.stack([decoded[i][1] for i in picks])
    return RealClip(path.stem, frames, pcm[: count * sample_rate // fps], sample_rate, fps)


def real_clips(folder: Path = REAL_DIR) -> list[Path]:
    return sorted(folder.glob("*.mp4"))


def lip_gaps(frames: np.ndarray) -> np.ndarray:
    """(T,) inner-lip gap over the interocular distance, read by the face mesh on every frame."""
    read = MeshReader(None)
    return np.array([lip_openness(read(f)) for f in frames])


def best_lag(measured: np.ndarray, real: np.ndarray, max_lag: int = MAX_LAG) -> tuple[float, int]:
    """(r, lag) at the lag in [-max_lag, max_lag] where ``measured`` follows ``real`` best."""
    scores = {lag: metrics.lagged_pearson(measured, real, lag) for lag in range(-max_lag, max_lag + 1)}
    lag = max(scores, key=lambda k: (scores[k], -abs(k)))
    return scores[lag], lag


def closed_frames(gap: np.ndarray) -> np.ndarray:
    """Frames whose gap lies in the bottom ``CLOSED_SHARE`` of the series' range, and below
    ``CLOSED_GAP``: a mouth that never meets its lips has no closed frames."""
    lo, hi = float(gap.min()), float(np.percentile(gap, 95))
    return gap <= min(lo + CLOSED_SHARE * (hi - lo), CLOSED_GAP)


def closures(real: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of closed real frames up to ``CLOSURE_MAX_FRAMES`` long, lips apart on both sides."""
    shut = closed_frames(real)
    runs, start = [], None
    for i, s in enumerate(shut.tolist() + [False]):
        if s and start is None:
            start = i
        elif not s and start is not None:
            if start > 0 and i < len(real) and i - start <= CLOSURE_MAX_FRAMES:
                runs.append((start, i))
            start = None
    return runs


def closures_matched(real: np.ndarray, generated: np.ndarray, lag: int) -> tuple[int, int]:
    """(closed by the avatar, real closures): the avatar closes one if its lips are closed in any
    frame of the run (shifted by ``lag``, ``CLOSURE_SLACK`` frames either side)."""
    runs = closures(real)
    shut = closed_frames(generated)
    hits = sum(bool(shut[max(a + lag - CLOSURE_SLACK, 0):max(b + lag + CLOSURE_SLACK, 0)].any()) for a, b in runs)
    return hits, len(runs)


def opening_range(gap: np.ndarray) -> float:
    return float(np.percentile(gap, 95) - np.percentile(gap, 5))


def score_series(measured: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    n = min(len(measured), len(real))
    r, lag = best_lag(measured[:n], real[:n])
    return {"r": r, "lag": lag}


@dataclass(frozen=True)
class Generated:
    """A photo session's frames and the wall seconds they took."""

    frames: np.ndarray
    seconds: float


@dataclass(frozen=True)
class DrawnAvatar:
    """A drawn avatar scored beside the photo: ``engine.render(pcm, **options)`` draws it."""

    label: str
    engine: Pipeline | PuppetPipeline
    identity: Identity
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def bundled(cls, pipe: Pipeline, identity: Identity) -> list[DrawnAvatar]:
        """``identity`` drawn in a session of ``pipe`` (its mouth heard) and by the puppet engine."""
        return [cls("drawn", pipe, identity, {"drawn": True}), cls("puppet", PuppetPipeline.from_config(), identity)]

    def opening(self, clip: RealClip, seed: int = 0) -> np.ndarray:
        """(T,) the drawn mouth's opening over ``clip``'s audio, read off the frames by the probe."""
        frames = np.stack([f.rgb for f in self.engine.render(clip.pcm, avatar=self.identity, seed=seed,
                                                              **self.options)])
        return measure_openness(frames, reference_image(self.identity, frames.shape[1]))


def score_drawn(opening: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """r at the best lag and the real closures a drawn mouth also closes."""
    n = min(len(opening), len(real))
    scores = score_series(opening[:n], real[:n])
    hits, total = closures_matched(real[:n], opening[:n], scores["lag"])
    return {**scores, "closures": {"closed": hits, "real": total}}


def side_by_side(clip: RealClip, real: np.ndarray, generated: np.ndarray, photo_frame: int, lag: int,
                 count: int = 6, tile: int = 128) -> np.ndarray:
    """Two rows of ``count`` tiles: the real face (cropped as the photo was) over the generated
    frame showing the same moment (``lag`` frames later), at moments spread over the real
    mouth's range from most closed to most open, shown in time order."""
    box = crop_box(find_face(clip.frames[photo_frame]), clip.frames.shape[1:])
    n = min(len(real), len(generated.frames) - max(lag, 0))
    order = np.argsort(real[:n], kind="stable")
    picks = sorted(order[np.linspace(0, n - 1, count).round().astype(int)])

    def fit(img: np.ndarray) -> np.ndarray:
        return cv2.resize(img, (tile, tile), interpolation=cv2.INTER_AREA)

    top = [fit(clip.frames[i, box.y0:box.y0 + box.side, box.x0:box.x0 + box.side]) for i in picks]
    bottom = [fit(generated.frames[min(max(i + lag, 0), len(generated.frames) - 1)]) for i in picks]
    return np.concatenate([np.concatenate(top, axis=1), np.concatenate(bottom, axis=1)], axis=0)


def evaluate_real_clip(pipe: Pipeline, clip: RealClip, seed: int = 0,
                       drawn: Sequence[DrawnAvatar] = ()) -> tuple[dict[str, Any], np.ndarray]:
    """The figures of one clip (see the module's docstring) and its side-by-side sheet."""
    real = lip_gaps(clip.frames)
    photo_frame = int(np.argmin(real))
    photo = photo_avatar(clip.frames[photo_frame])
    made = Generated(*render_photo(pipe, photo, clip.pcm, seed))
    generated = lip_gaps(made.frames)
    n = min(len(real), len(generated))
    avatar = score_series(generated[:n], real[:n])
    hits, total = closures_matched(real[:n], generated[:n], avatar["lag"])
    sheet = side_by_side(clip, real, made, photo_frame, avatar["lag"])
    frames, seconds = made.frames, made.seconds
    return {
        "name": clip.name, "held_out": clip.name in HELD_OUT, "seconds": round(clip.seconds, 2),
        "avatar": avatar,
        "envelope": score_series(loudness_envelope(clip.pcm, clip.sample_rate, clip.fps), real),
        "heard": score_series(openness_series(clip.pcm, clip.sample_rate, clip.fps), real),
        "closures": {"closed": hits, "real": total, "share": hits / total if total else None},
        "range": {"real": opening_range(real[:n]), "avatar": opening_range(generated[:n]),
                  "ratio": opening_range(generated[:n]) / max(opening_range(real[:n]), 1e-6)},
        "fps": len(frames) / seconds,
        **{d.label: score_drawn(d.opening(clip, seed), real) for d in drawn},
    }, sheet


DRAWN = ("drawn", "puppet")  # the drawn avatars' keys, where a clip has them


def closure_share(closures: list[dict[str, Any]]) -> float | None:
    real = sum(c["real"] for c in closures)
    return sum(c["closed"] for c in closures) / real if real else None


def summary(clips: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over clips: r of the avatar, the envelope and the heard mouth, their ratio, closures,
    range; r and closures of the drawn avatars."""
    if not clips:
        return {}
    mean = lambda key: float(np.mean([c[key]["r"] for c in clips]))  # noqa: E731
    out = {
        "clips": len(clips), "avatar_r": mean("avatar"), "envelope_r": mean("envelope"), "heard_r": mean("heard"),
        "avatar_over_envelope": mean("avatar") / max(mean("envelope"), 1e-6),
        "closures_share": closure_share([c["closures"] for c in clips]),
        "range_ratio": float(np.mean([c["range"]["ratio"] for c in clips])),
    }
    for key in DRAWN:
        if all(key in c for c in clips):
            out[f"{key}_r"] = mean(key)
            out[f"{key}_closures_share"] = closure_share([c[key]["closures"] for c in clips])
    return out


def evaluate_real(pipe: Pipeline, paths: list[Path], seed: int = 0, log: Callable[[str], None] = print,
                  sheet: Path | None = None, drawn: Sequence[DrawnAvatar] = ()) -> dict[str, Any]:
    """Every clip's figures, and their means over the tuning clips and over the held-out ones;
    with ``sheet``, a PNG of each clip's real frames over its generated ones; ``drawn``: drawn
    avatars scored beside the photo."""
    out, sheets = [], []
    t0 = time.perf_counter()
    for path in paths:
        clip = load_real_clip(path, pipe.sample_rate, pipe.fps)
        scores, pair = evaluate_real_clip(pipe, clip, seed, drawn)
        out.append(scores)
        sheets.append(pair)
        log(f"  {clip.name}: avatar r={scores['avatar']['r']:.3f} (lag {scores['avatar']['lag']:+d}) "
            f"envelope r={scores['envelope']['r']:.3f} heard r={scores['heard']['r']:.3f} "
            f"closures {scores['closures']['closed']}/{scores['closures']['real']} "
            f"range x{scores['range']['ratio']:.2f}"
            + "".join(f" {d.label} r={scores[d.label]['r']:.3f}" for d in drawn))
    if sheet is not None:
        save_png(sheet, np.concatenate(sheets, axis=0))
    return {"clips": out, "tuning": summary([c for c in out if not c["held_out"]]),
            "held_out": summary([c for c in out if c["held_out"]]), "max_lag": MAX_LAG,
            "seconds": round(time.perf_counter() - t0, 1)}


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def format_real_table(result: dict[str, Any]) -> str:
    drawn = [k for k in DRAWN if result["clips"] and all(k in c for c in result["clips"])]
    rows = [("clip", "avatar r", "lag", "envelope r", "heard r", "closures", "range x",
             *(f"{k} r, closures" for k in drawn))]
    for c in result["clips"]:
        share = c["closures"]["share"]
        rows.append((c["name"] + (" (held out)" if c["held_out"] else ""), f"{c['avatar']['r']:.3f}",
                     f"{c['avatar']['lag']:+d}", f"{c['envelope']['r']:.3f}", f"{c['heard']['r']:.3f}",
                     f"{c['closures']['closed']}/{c['closures']['real']}" + ("" if share is None else f" {share:.0%}"),
                     f"{c['range']['ratio']:.2f}",
                     *(f"{c[k]['r']:.3f} {c[k]['closures']['closed']}/{c[k]['closures']['real']}" for k in drawn)))
    for key in ("tuning", "held_out"):
        s = result[key]
        if s:
            rows.append((f"mean, {key.replace('_', ' ')}", f"{s['avatar_r']:.3f}", "", f"{s['envelope_r']:.3f}",
                         f"{s['heard_r']:.3f}", _share(s["closures_share"]), f"{s['range_ratio']:.2f}",
                         *(f"{s[f'{k}_r']:.3f} {_share(s[f'{k}_closures_share'])}" for k in drawn)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def update_real_card(path: Path, result: dict[str, Any], command: str) -> None:
    """Record ``result`` in ``model_card.json`` as ``evaluation.real_mouths``; every other key is kept."""
    import json

    card = json.loads(path.read_text()) if path.exists() else {}
    per_clip = {c["name"]: {"avatar_r": round(c["avatar"]["r"], 3), "lag": c["avatar"]["lag"],
                            "envelope_r": round(c["envelope"]["r"], 3), "heard_r": round(c["heard"]["r"], 3),
                            "closures": f"{c['closures']['closed']}/{c['closures']['real']}",
                            "range_ratio": round(c["range"]["ratio"], 2), "held_out": c["held_out"],
                            **{f"{k}_r": round(c[k]["r"], 3) for k in DRAWN if k in c},
                            **{f"{k}_closures": f"{c[k]['closures']['closed']}/{c[k]['closures']['real']}"
                               for k in DRAWN if k in c}}
                for c in result["clips"]}
    card.setdefault("evaluation", {})["real_mouths"] = {
        "clips": per_clip, "tuning": result["tuning"], "held_out": result["held_out"], "max_lag": result["max_lag"],
        "sources": "engine/eval/real_mouths/SOURCES.md", "command": command}
    path.write_text(json.dumps(card, indent=2) + "\n")
