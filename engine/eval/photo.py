"""``avatar eval --image``: score a photo avatar on held-out speech, judged by the face mesh.

A photo session's frames are the photograph warped to the motion of a generated driver face
(``engine.stages.redraw``), so there is no ground-truth video to compare with; the
photo is scored by what mediapipe's face mesh (``engine.face``) reads back from its frames:

* lip sync: the inner-lip gap (``Face.lip_gap``, over the interocular distance so head
  motion does not count) on every generated frame against the mouth ground truth the stylised
  eval scores against (``Clip.truth``: the mouth of the phones the speech says; against the
  audio's loudness envelope as a secondary line),
  Pearson r at lag 0 and at the best lag in [-3, 3] frames (``run.pooled_lip_sync``), on the
  held-out clips of ``material`` (voices and sentences training never saw);
* upper-face identity: SSIM (``metrics.ssim``) of the eyes, brows and forehead against the
  photo's crop, after a similarity transform from the frame's mesh to the photo's mesh on the
  points above the nose the rig moves only with the head, refined by an affine ECC fit
  (``UpperFace`` says why), on every clip frame and, over a long session fed a loop of
  held-out speech with pauses, on one second of frames at the end of every minute, where the
  session's rolling state bytes (tensors, and the audio fed ahead) are read too;
* mouth-region seams (``seam_scores``): the gradient on the band where warped pixels meet the
  photo's own, with the mouth open against closed, and the mouth box's temporal jitter;
* fps: published frames per wall-clock second of the whole pipeline (DiT, decoder, motion
  reader, photo warp), batch (the clips) and streamed (the long session).

``python -m engine.eval.photo --pictures PNG`` draws the astronaut portrait and the default
bundled avatar side by side (reference, mouth closed, mouth open; the avatar decoded and drawn).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from engine.eval import metrics
from engine.eval.envelope import loudness_envelope
from engine.eval.material import make_clip
from engine.eval.mesh import MeshReader, PhotoEvalError
from engine.eval.mouths import THRESHOLDS as MOUTH_THRESHOLDS
from engine.eval.mouths import MouthChecks, mouth_checks
from engine.eval.run import jsonable, long_audio, pooled_lip_sync
from engine.face.checks import FaceError
from engine.face.landmarks import (
    FOREHEAD,
    LEFT_BROW,
    LEFT_EYE_CORNERS,
    LEFT_EYE_LOWER,
    LEFT_EYE_UPPER,
    LEFT_LID_CREASE,
    NOSE_TIP,
    RIGHT_BROW,
    RIGHT_EYE_CORNERS,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    RIGHT_LID_CREASE,
    Face,
    lip_gap,
)
from engine.face.rig import PhotoRig
from engine.frames import drain
from engine.media.image import ImageError, load_image
from engine.photo.avatar import PhotoAvatar, photo_avatar
from engine.pipeline import Pipeline
from engine.presets import Preset

MAX_LAG = 3
THRESHOLDS = {
    "lip_sync_r_min": 0.7,  # at the best lag
    "lip_sync_max_abs_lag": 1,
    "upper_face_ssim_min": 0.9,  # every minute of the long session
    "seam_ratio_max": 1.2,  # band gradient, mouth open over closed
    # Tensors held between chunks, (max - min) / min over the minutes (the audio held besides is
    # what was fed ahead of the chunks, up to a chunk's piece: reported, not part of the drift).
    "bytes_drift_max": 0.02,
}
WINDOW_SECONDS = 1.0  # frames scored at each minute of the long session
SEAM_BAND = 5  # pixels: width of the band along the composite boundary


def load_photo(path: str | Path) -> PhotoAvatar:
    """The photo avatar of an image file, or ``PhotoEvalError`` (unreadable, no usable face)."""
    try:
        return photo_avatar(load_image(path))
    except ImageError as exc:
        raise PhotoEvalError(str(exc)) from None
    except FaceError as exc:
        raise PhotoEvalError(f"{path}: {exc.reason}") from None


def lip_openness(landmarks: np.ndarray) -> float:
    """The inner-lip gap over the interocular distance (a head moving nearer opens no mouth)."""
    return lip_gap(landmarks) / max(Face(landmarks).interocular, 1e-6)


def upper_face_box(face: Face) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of the eyes, brows and forehead in the photo: from the top of the face
    oval to just under the lower lids, from the outer brow ends, padded by a tenth of the
    interocular distance."""
    lm = face.landmarks
    pad = 0.1 * face.interocular
    sides = lm[list(RIGHT_BROW + LEFT_BROW + RIGHT_EYE_CORNERS + LEFT_EYE_CORNERS), 0]
    lids = lm[list(RIGHT_EYE_LOWER + LEFT_EYE_LOWER), 1]
    y0, y1 = max(int(lm[FOREHEAD, 1]), 0), int(np.ceil(lids.max() + 1.5 * pad))
    return y0, y1, max(int(sides.min() - pad), 0), int(np.ceil(sides.max() + pad))


def align_points(face: Face) -> np.ndarray:
    """Indices of the landmarks a frame is aligned on: every one above the photo's nose tip that
    the rig moves only with the head (not the lids and the lid skin, which blink). Hundreds of
    points, so the mesh's jitter of about a pixel per point averages out."""
    lm = face.landmarks
    lids = set(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER + LEFT_EYE_UPPER + LEFT_EYE_LOWER + RIGHT_LID_CREASE
               + LEFT_LID_CREASE)
    return np.array([i for i in range(len(lm)) if lm[i, 1] < lm[NOSE_TIP, 1] and i not in lids])


def aligned_to_photo(frame: np.ndarray, landmarks: np.ndarray, photo_landmarks: np.ndarray,
                     points: np.ndarray) -> np.ndarray:
    """``frame`` warped by the similarity transform that takes its ``points`` onto the photo's."""
    m, _ = cv2.estimateAffinePartial2D(landmarks[points, :2].astype(np.float32),
                                       photo_landmarks[points, :2].astype(np.float32), method=cv2.LMEDS)
    if m is None:
        return frame
    return cv2.warpAffine(frame, m, (frame.shape[1], frame.shape[0]), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REPLICATE)


def refined(region: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``region`` registered onto ``reference`` by an affine ECC fit (grey levels, from the identity);
    ``region`` as it is if the fit does not converge."""
    ref = cv2.cvtColor(reference, cv2.COLOR_RGB2GRAY).astype(np.float32)
    cur = cv2.cvtColor(region, cv2.COLOR_RGB2GRAY).astype(np.float32)
    warp = np.eye(2, 3, dtype=np.float32)
    try:
        _, warp = cv2.findTransformECC(ref, cur, warp, cv2.MOTION_AFFINE,
                                       (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 50, 1e-5), None, 5)
    except cv2.error:
        return region
    return cv2.warpAffine(region, warp, (region.shape[1], region.shape[0]),
                          flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)


class UpperFace:
    """SSIM of a frame's eyes/brows/forehead against the photo crop's, after alignment.

    The frame is aligned to the photo by a similarity transform between the two meshes
    (``align_points``); that alone leaves about a pixel of error (the photo re-meshed against
    itself scores ~0.86: SSIM's 11-pixel window is that sensitive on hair and lashes), so the
    region is then registered by an affine ECC fit, which also takes out the foreshortening of
    a nodding or turning head (pose, not identity). What is left to lower the score is what the
    rig and the resampling did to the pixels: blur, a blink, a stretched brow. ``__call__``
    returns (refined, landmarks only).
    """

    def __init__(self, photo: PhotoAvatar) -> None:
        self.photo = photo
        y0, y1, x0, x1 = upper_face_box(photo.face)
        s = photo.image.shape[0]
        self.box = (y0, min(y1, s), x0, min(x1, s))
        self.points = align_points(photo.face)
        self.reference = photo.image[self.box[0] : self.box[1], self.box[2] : self.box[3]]

    def __call__(self, frame: np.ndarray, landmarks: np.ndarray) -> tuple[float, float]:
        y0, y1, x0, x1 = self.box
        region = aligned_to_photo(frame, landmarks, self.photo.face.landmarks, self.points)[y0:y1, x0:x1]
        coarse = metrics.ssim(region[None], self.reference[None])
        return metrics.ssim(refined(region, self.reference)[None], self.reference[None]), coarse


# --- seams -------------------------------------------------------------------------------------


def seam_band(rig: PhotoRig, face: Face, width: int = SEAM_BAND) -> np.ndarray:
    """(S, S) bool: the band along the edge of ``rig.motion_region`` below the nose tip.

    Outside the motion region a photo frame is the photo's own pixels, inside it the warp; the
    boundary is where the composite could tear (a warp that does not meet the identity map, a
    step where copied pixels meet remapped ones). Below the nose it is the band the jaw drop
    stretches: the cheeks, chin and neck.
    """
    region = rig.motion_region.astype(np.uint8)
    kernel = np.ones((width, width), np.uint8)
    band = cv2.dilate(region, kernel) > cv2.erode(region, kernel)
    band[: int(face.landmarks[NOSE_TIP, 1])] = False
    return band


def band_gradient(frame: np.ndarray, band: np.ndarray) -> float:
    """Mean Sobel gradient magnitude of the grey frame over ``band`` (0..255 units per pixel)."""
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY).astype(np.float32)
    mag = cv2.magnitude(cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3)) / 8.0
    return float(mag[band].mean())


def mouth_box(face: Face) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): from the nose tip down past the chin, a mouth width either side of the mouth."""
    lm = face.landmarks
    w = face.mouth_width
    cx = float(face.mouth_center[0])
    y0, y1 = int(lm[NOSE_TIP, 1]), int(lm[152, 1] + 0.3 * w)
    return max(y0, 0), y1, max(int(cx - w), 0), int(cx + w)


def mouth_jitter(frames: np.ndarray, box: tuple[int, int, int, int]) -> float:
    """Mean |second temporal difference| over mean |first difference| in the mouth box.

    Coherent motion (the jaw easing open and shut) keeps the second difference small next to
    the first; frame-to-frame flicker (a triangle flipping, a mask popping, a reading that
    chatters) makes them alike: independent noise scores sqrt(3) = 1.73. The puppet renderer's own
    video of held-out speech (the stylised ground truth) scores about 1.4 in its mouth box.
    """
    y0, y1, x0, x1 = box
    v = frames[:, y0:y1, x0:x1].astype(np.int16)
    d1 = np.abs(np.diff(v, axis=0)).mean()
    d2 = np.abs(np.diff(v, n=2, axis=0)).mean()
    return float(d2 / d1) if d1 > 0 else 0.0


def seam_scores(frames: np.ndarray, openness: np.ndarray, photo: PhotoAvatar, band: np.ndarray) -> dict[str, float]:
    """Seams of one clip: the composite boundary's gradient on its most open frame and on its
    most closed one (``open_over_closed``: 1.0 = opening the mouth adds no edge where the warp
    meets the photo; a tear raises it: the warped pixels shifted 2 px against the photo's score
    about 1.15, 4 px about 1.34) and each over the photo's own (``*_over_photo``), plus
    ``mouth_jitter`` over the clip."""
    photo_g = band_gradient(photo.image, band)
    g_open = band_gradient(frames[int(np.argmax(openness))], band)
    g_closed = band_gradient(frames[int(np.argmin(openness))], band)
    return {
        "open_over_closed": g_open / max(g_closed, 1e-6),
        "open_over_photo": g_open / max(photo_g, 1e-6),
        "closed_over_photo": g_closed / max(photo_g, 1e-6),
        "mouth_jitter": mouth_jitter(frames, mouth_box(photo.face)),
    }


# --- runs --------------------------------------------------------------------------------------


def render_photo(pipe: Pipeline, photo: PhotoAvatar, pcm: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """(T, S, S, 3) frames of a photo session fed ``pcm`` at once, and the wall seconds it took."""
    t0 = time.perf_counter()
    session = pipe.open_session(photo=photo, seed=seed)
    session.feed(pcm)
    session.close_input()
    frames = np.stack([f.rgb for f in drain(session)])
    return frames, time.perf_counter() - t0


def score_frames(frames: np.ndarray, photo: PhotoAvatar,
                 upper: UpperFace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per frame: lip openness (mesh), (T,), and upper-face SSIM, (T, 2): refined, landmarks only."""
    read, upper = MeshReader(photo.face.box), upper or UpperFace(photo)
    opens, ssims = np.empty(len(frames)), np.empty((len(frames), 2))
    for i, frame in enumerate(frames):
        lm = read(frame)
        opens[i], ssims[i] = lip_openness(lm), upper(frame, lm)
    return opens, ssims


def evaluate_photo_clips(pipe: Pipeline, photo: PhotoAvatar, clips: int = 4, seed: int = 0,
                         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Lip sync, upper-face SSIM, seams and batch fps on ``clips`` held-out speech clips."""
    rig, upper = PhotoRig.from_photo(photo.image, photo.face), UpperFace(photo)
    band = seam_band(rig, photo.face)
    pairs, envelope_pairs, out, frames_total, wall = [], [], [], 0, 0.0
    for k in range(clips):
        clip = make_clip(k, pipe.sample_rate, seed)
        frames, seconds = render_photo(pipe, photo, clip.pcm, seed + k)
        opens, ssims = score_frames(frames, photo, upper)
        truth = clip.truth(pipe.fps).openness
        envelope = loudness_envelope(clip.pcm, pipe.sample_rate, pipe.fps)
        n = min(len(opens), len(truth))
        pairs.append((opens[:n], truth[:n]))
        envelope_pairs.append((opens[:n], envelope[:n]))
        sync = metrics.lip_sync_series(opens[:n], truth[:n], MAX_LAG)
        seams = seam_scores(frames[:n], opens[:n], photo, band)
        out.append({"name": clip.name, "seconds": round(clip.seconds, 2), "speech": clip.description,
                    "lip_sync": sync, "upper_face_ssim_mean": float(ssims[:, 0].mean()),
                    "upper_face_ssim_min": float(ssims[:, 0].min()),
                    "upper_face_ssim_landmarks_only": float(ssims[:, 1].mean()),
                    "seams": seams, "fps": len(frames) / seconds})
        frames_total, wall = frames_total + len(frames), wall + seconds
        log(f"  {clip.name}: r={sync['pearson_r']:.3f} best lag {sync['best_lag']:+d} r={sync['r_at_best_lag']:.3f} "
            f"ssim={ssims[:, 0].mean():.3f} (min {ssims[:, 0].min():.3f}) seam={seams['open_over_closed']:.3f} "
            f"fps={len(frames) / seconds:.1f}")
    return {
        "clips": out,
        "lip_sync": pooled_lip_sync(pairs, MAX_LAG),
        "lip_sync_envelope": pooled_lip_sync(envelope_pairs, MAX_LAG),
        "upper_face_ssim_mean": float(np.mean([c["upper_face_ssim_mean"] for c in out])),
        "upper_face_ssim_min": float(min(c["upper_face_ssim_min"] for c in out)),
        "upper_face_ssim_landmarks_only": float(np.mean([c["upper_face_ssim_landmarks_only"] for c in out])),
        "seams": {key: float(np.mean([c["seams"][key] for c in out])) for key in out[0]["seams"]},
        "fps": frames_total / wall,
    }


def stream_pieces(minutes: float, sample_rate: int, fps: int, piece: int, seed: int) -> Iterator[np.ndarray]:
    """``long_audio`` (held-out speech with pauses, looped) cut into ``piece``-sample feeds."""
    for pcm, _ in long_audio(minutes, sample_rate, fps, seed):
        for i in range(0, len(pcm), piece):
            yield pcm[i : i + piece]


def evaluate_photo_long(pipe: Pipeline, photo: PhotoAvatar, minutes: float, seed: int = 0,
                        progress: bool = True) -> dict[str, Any]:
    """One photo session fed ``minutes`` of looped held-out speech one chunk's audio at a time,
    as a live stream is; at the end of every minute (and after the first second) the last
    second of frames is scored (upper-face SSIM, lip openness range) and ``session.nbytes()``
    read. Only per-frame numbers are kept, never the frames."""
    from tqdm import tqdm

    fps, spf = pipe.fps, pipe.config.samples_per_frame
    window = max(round(WINDOW_SECONDS * fps), 1)
    total = round(minutes * 60 * fps)
    marks = [window] + [min(round(m * 60 * fps), total) for m in range(1, int(np.ceil(minutes)) + 1)]
    piece = pipe.frames_per_chunk * spf
    upper, read = UpperFace(photo), MeshReader(photo.face.box)
    scores: dict[int, list[tuple[float, float]]] = {m: [] for m in marks}
    held: dict[int, dict[str, int]] = {}
    frames = 0
    session = pipe.open_session(photo=photo, seed=seed)
    t0 = time.perf_counter()

    def take(published: list) -> int:
        nonlocal frames
        for f in published:
            for m in marks:
                if m - window <= f.index < m:
                    scores[m].append(upper(f.rgb, read(f.rgb)))
        frames += len(published)
        for m in marks:
            if m not in held and frames >= m:
                held[m] = {"total": int(session.nbytes()), "state": int(session.state.nbytes()),
                           "audio": int(session.audio.nbytes())}
        return len(published)

    with tqdm(total=total, unit="frame", desc="photo long run", disable=not progress) as bar:
        for pcm in stream_pieces(minutes, pipe.sample_rate, fps, piece, seed):
            session.feed(pcm)
            while session.ready():
                bar.update(take(session.step()))
        session.close_input()
        while not session.finished:
            bar.update(take(session.step()))
    wall = time.perf_counter() - t0
    rows = [{"minute": round(m / (60 * fps), 3), "upper_face_ssim": float(np.mean([v[0] for v in scores[m]])),
             "upper_face_ssim_min": float(np.min([v[0] for v in scores[m]])),
             "upper_face_ssim_landmarks_only": float(np.mean([v[1] for v in scores[m]])),
             "frames_scored": len(scores[m]),
             "bytes": held.get(m, {}).get("total"), "state_bytes": held.get(m, {}).get("state"),
             "audio_bytes": held.get(m, {}).get("audio")} for m in marks if scores[m]]
    summary = long_summary(rows)
    return {
        "minutes": minutes,
        "frames": frames,
        "fps": frames / wall,
        "per_minute": rows,
        **summary,
    }


def long_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``bytes_drift`` of the state bytes over the whole minutes (the first row, a second in, only if
    there are none) and the most audio any minute held."""
    minutes = [r for r in rows[1:] if r["state_bytes"] is not None] or rows[:1]
    state = [r["state_bytes"] for r in minutes]
    return {"bytes_drift": (max(state) - min(state)) / max(min(state), 1),
            "audio_bytes_max": max(r["audio_bytes"] or 0 for r in rows)}


def evaluate_photo(pipe: Pipeline, photo: PhotoAvatar, clips: int = 4, minutes: float = 10.0, seed: int = 0,
                   progress: bool = True, image: str | None = None) -> dict[str, Any]:
    """All of the photo evaluation, as a JSON-able dict (see ``format_photo_table``)."""
    log = print if progress else (lambda _: None)
    result: dict[str, Any] = {
        "image": image,
        "config": pipe.config.name,
        "schedule": {"chunk": pipe.config.schedule.chunk, "interp": pipe.config.schedule.interp},
        "device": pipe.device,
        "steps": pipe.steps,
        "frame_size": list(photo.frame_size),
        "seed": seed,
        "max_lag": MAX_LAG,
        "thresholds": THRESHOLDS,
        "load_average_start": os.getloadavg()[0],  # other work on the machine slows the fps figures
    }
    log(f"photo eval: {clips} held-out clips")
    result.update(evaluate_photo_clips(pipe, photo, clips, seed, log))
    result["mouth"] = dataclasses.asdict(mouth_checks(photo, seed))  # rendered by the rig, read by the mesh
    if minutes > 0:
        log(f"photo eval: long run, {minutes:g} min through one session")
        result["long"] = evaluate_photo_long(pipe, photo, minutes, seed, progress)
    result["load_average_end"] = os.getloadavg()[0]
    result["passes"] = photo_verdicts(result)
    return jsonable(result)


def photo_verdicts(result: dict[str, Any]) -> dict[str, bool | None]:
    ls = result["lip_sync"]
    long = result.get("long")
    mouth = MouthChecks(**result["mouth"]).verdicts() if "mouth" in result else {}
    return {
        "lip_sync_r": ls["r_at_best_lag"] >= THRESHOLDS["lip_sync_r_min"],
        "lip_sync_lag": abs(ls["best_lag"]) <= THRESHOLDS["lip_sync_max_abs_lag"],
        "seam_ratio": result["seams"]["open_over_closed"] <= THRESHOLDS["seam_ratio_max"],
        "upper_face_ssim": None if not long else all(
            r["upper_face_ssim"] >= THRESHOLDS["upper_face_ssim_min"] for r in long["per_minute"]),
        "bytes_flat": None if not long else long["bytes_drift"] <= THRESHOLDS["bytes_drift_max"],
        **{f"mouth_{k}": v for k, v in mouth.items()},
    }


def format_photo_table(result: dict[str, Any]) -> str:
    """A fixed-width summary of ``evaluate_photo``'s result."""
    ls, seams = result["lip_sync"], result["seams"]
    rows = [
        ("metric", "value", "target"),
        ("lip sync r (lag 0)", f"{ls['pearson_r']:.3f}", "report"),
        (f"best lag in [-{MAX_LAG}, {MAX_LAG}] (frames)", f"{ls['best_lag']:+d}", "|lag| <= 1"),
        ("r at best lag", f"{ls['r_at_best_lag']:.3f}", ">= 0.70"),
        ("upper-face SSIM, clips (mean)", f"{result['upper_face_ssim_mean']:.3f}", "report"),
        ("upper-face SSIM, clips (min frame)", f"{result['upper_face_ssim_min']:.3f}", "report"),
        ("upper-face SSIM, landmark alignment only", f"{result['upper_face_ssim_landmarks_only']:.3f}", "report"),
        ("seam band gradient, open / closed", f"{seams['open_over_closed']:.3f}", "<= 1.20"),
        ("seam band gradient, open / photo", f"{seams['open_over_photo']:.3f}", "report"),
        ("mouth jitter (|d2| / |d1|)", f"{seams['mouth_jitter']:.3f}", "report (noise 1.73)"),
        ("fps, batch clips", f"{result['fps']:.1f}", "report"),
    ]
    mouth = result.get("mouth")
    if mouth:
        t = MOUTH_THRESHOLDS
        rows += [
            ("mouth: teeth rigidity (SSIM, head turned)", f"{mouth['rigidity']:.3f}", f">= {t['rigidity_min']}"),
            ("mouth: brightest interior - eye whites", f"{mouth['brightest_over_eye_whites']:+.1f}",
             f"<= {t['brightest_over_eye_whites_max']:g}"),
            ("mouth: near-black share of an opening", f"{mouth['darkest_share']:.3f}",
             f"<= {t['darkest_share_max']:.2f}"),
            ("mouth: chin drop vs lip gap r", f"{mouth['chin_r']:.3f}", f">= {t['chin_r_min']}"),
            ("mouth: corner lift talking / at rest", "-" if mouth["smile_eases"] is None
             else f"{mouth['smile_eases']:.2f}", "< 1 (smiles)"),
        ]
    long = result.get("long")
    if long:
        rows.append(("fps, streamed session", f"{long['fps']:.1f}", "report"))
        for r in long["per_minute"]:
            when = f"at {r['minute'] * 60:.0f} s" if r["minute"] < 1 else f"minute {r['minute']:g}"
            rows.append((f"{when}: upper-face SSIM / state + audio bytes",
                         f"{r['upper_face_ssim']:.3f} / {r['state_bytes']} + {r['audio_bytes']}", ">= 0.90 / flat"))
        rows.append(("state bytes drift over the minutes", f"{long['bytes_drift']:.4f}", "<= 0.02"))
        rows.append(("most audio held (bytes)", f"{long['audio_bytes_max']}", "report"))
    rows.append(("load average at start / end", f"{result['load_average_start']:.1f} / "
                 f"{result['load_average_end']:.1f}", "report (2 cores)"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(wd) for c, wd in zip(row, widths, strict=True)) for row in rows]
    lines.append("passes: " + ", ".join(f"{k}={'-' if v is None else ('yes' if v else 'NO')}"
                                        for k, v in result["passes"].items()))
    return "\n".join(lines)


def update_photo_card(path: Path, result: dict[str, Any], command: str) -> None:
    """Record ``result`` in ``model_card.json`` as ``evaluation.photo``; every other key is kept."""
    import json

    card = json.loads(path.read_text()) if path.exists() else {}
    entry = {k: v for k, v in result.items() if k != "clips"}
    entry["clips"] = len(result["clips"])
    entry["command"] = command
    card.setdefault("evaluation", {})["photo"] = entry
    path.write_text(json.dumps(card, indent=2) + "\n")


# --- pictures ----------------------------------------------------------------------------------


def _labelled(tile: np.ndarray, text: str) -> np.ndarray:
    strip = np.full((34, tile.shape[1], 3), 255, np.uint8)
    cv2.putText(strip, text, (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 0, 0), 1, cv2.LINE_AA)
    return np.concatenate([strip, tile], axis=0)


def closed_and_open(frames: np.ndarray, openness: np.ndarray, speaking: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The most closed frame while the audio speaks (lips meeting mid-sentence) and the most open one."""
    idx = np.flatnonzero(speaking[: len(frames)]) if speaking[: len(frames)].any() else np.arange(len(frames))
    o = openness[idx]
    return frames[idx[int(np.argmin(o))]], frames[idx[int(np.argmax(o))]]


def pictures(path: Path, pipe: Pipeline, photo: PhotoAvatar, tile: int = 384) -> None:
    """One PNG: the photo's crop, a mouth-closed and a mouth-open frame of a held-out speech render;
    below, the same for the default bundled avatar (its reference upscaled to the photo's size), as
    decoded and as drawn (``drawn=True``), with the eyes of both open frames side by side, enlarged."""
    from engine.avatars import DEFAULT_AVATAR, avatar_image
    from engine.eval.probe import measure_openness

    clip = make_clip(0, pipe.sample_rate)
    truth = clip.truth(pipe.fps).openness
    speaking = truth > 0.05
    frames, _ = render_photo(pipe, photo, clip.pcm)
    opens, _ = score_frames(frames, photo)
    p_closed, p_open = closed_and_open(frames, opens, speaking)
    ref = avatar_image(DEFAULT_AVATAR, pipe.frame_size)
    stylised = np.stack([f.rgb for f in pipe.render(clip.pcm, avatar=DEFAULT_AVATAR)])
    s_closed, s_open = closed_and_open(stylised, measure_openness(stylised, ref), speaking)
    drawn = np.stack([f.rgb for f in pipe.render(clip.pcm, avatar=DEFAULT_AVATAR, drawn=True)])
    d_closed, d_open = closed_and_open(drawn, measure_openness(drawn, ref), speaking)
    h = ref.shape[0]
    eyes = np.concatenate([f[int(0.3 * h):int(0.55 * h), int(0.25 * h):int(0.75 * h)] for f in (s_open, d_open)])

    def up(img: np.ndarray) -> np.ndarray:
        return cv2.resize(img, (tile, tile), interpolation=cv2.INTER_AREA if img.shape[0] > tile else cv2.INTER_CUBIC)

    rows = [
        [("photo crop (reference)", photo.image), ("photo, mouth closed", p_closed), ("photo, mouth open", p_open)],
        [(f"bundled '{DEFAULT_AVATAR}' (reference)", ref), (f"'{DEFAULT_AVATAR}', mouth closed", s_closed),
         (f"'{DEFAULT_AVATAR}', mouth open", s_open)],
        [(f"'{DEFAULT_AVATAR}' drawn, mouth closed", d_closed), (f"'{DEFAULT_AVATAR}' drawn, mouth open", d_open),
         ("eyes: decoded over drawn", eyes)],
    ]
    sheet = np.concatenate([np.concatenate([_labelled(up(img), text) for text, img in row], axis=1) for row in rows])
    from PIL import Image

    Image.fromarray(sheet).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.eval.photo",
                                     description="pictures of a photo avatar next to the default bundled avatar")
    parser.add_argument("--pictures", required=True, metavar="PNG", help="where to write the PNG")
    parser.add_argument("--image", default=None, help="the photo (default: scikit-image's astronaut portrait)")
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.image:
        photo = load_photo(args.image)
    else:
        from skimage import data

        photo = photo_avatar(np.ascontiguousarray(data.astronaut()))
    pipe = Pipeline.from_config(args.config, threads=args.threads).preset(Preset.FAST)
    pictures(Path(args.pictures), pipe, photo)
    print(f"wrote {args.pictures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
