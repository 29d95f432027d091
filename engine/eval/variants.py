"""Variations of one photograph, and how a photo avatar of each fares: what it can and cannot take.

Only public-domain test photos are used (scikit-image's astronaut portrait), so what a user's
photo may hold that it does not (glasses, a beard, a hand, hard light, a tilted or small head)
is drawn onto it here, placed by its own face mesh. Each variant is either refused with the
reason a user would read, or animated and scored as ``avatar eval --image`` scores a photo:
the face mesh's lip gap on the generated frames against the speech (held-out clips), the
upper-face SSIM against the variant itself, and the mouth-seam ratio.

``python -m engine.eval.variants`` prints the table; ``--card`` records it in the model card
as ``evaluation.photo_variants``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from engine.face.checks import FaceError, find_face
from engine.face.landmarks import CHEEKBONES, JAW, LIPS_OUTER_LOWER, LIPS_OUTER_UPPER, Face
from engine.photo.avatar import photo_avatar
from engine.presets import Preset

Draw = Callable[[np.ndarray, Face], np.ndarray]


@dataclass(frozen=True)
class Variant:
    name: str
    what: str  # one line for the table
    draw: Draw  # (H, W, 3) uint8 photo and its face -> the variant, a new array


def _blend(image: np.ndarray, mask: np.ndarray, colour: np.ndarray, alpha: float) -> np.ndarray:
    """``image`` with ``colour`` (3,) or (H, W, 3) laid over where ``mask`` (H, W) in [0, 1] is, at ``alpha``."""
    m = (mask.astype(np.float32) * alpha)[..., None]
    out = image.astype(np.float32) * (1 - m) + np.broadcast_to(colour, image.shape).astype(np.float32) * m
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _feathered(mask: np.ndarray, sigma: float) -> np.ndarray:
    return cv2.GaussianBlur(mask.astype(np.float32), (0, 0), sigma)


def _eye_centres(face: Face) -> tuple[np.ndarray, np.ndarray]:
    return face.right_eye_center[:2], face.left_eye_center[:2]


def glasses(image: np.ndarray, face: Face, tint: float = 0.12, rim: float = 0.07) -> np.ndarray:
    """Round dark-rimmed glasses over both eyes, a bridge and the arms towards the ears; the lenses
    darken what is behind them by ``tint`` (0.85: sunglasses)."""
    io = face.interocular
    r_eye, l_eye = _eye_centres(face)
    radius = 0.42 * io
    lens = np.zeros(image.shape[:2], np.float32)
    frame = np.zeros_like(lens)
    thick = max(2, round(rim * io))
    for c in (r_eye, l_eye):
        centre = (round(c[0]), round(c[1]))
        axes = (round(radius), round(radius * 0.8))
        cv2.ellipse(lens, centre, axes, 0, 0, 360, 1.0, -1, cv2.LINE_AA)
        cv2.ellipse(frame, centre, axes, 0, 0, 360, 1.0, thick, cv2.LINE_AA)
    half = (l_eye - r_eye) / np.linalg.norm(l_eye - r_eye) * radius
    cv2.line(frame, tuple(np.round(r_eye + half).astype(int)), tuple(np.round(l_eye - half).astype(int)),
             1.0, max(2, thick // 2), cv2.LINE_AA)
    for c, side in ((r_eye, -1), (l_eye, 1)):
        start = c + side * np.array([radius, 0.0])
        end = start + side * np.array([0.45 * io, -0.05 * io])
        cv2.line(frame, tuple(np.round(start).astype(int)), tuple(np.round(end).astype(int)),
                 1.0, max(2, thick // 2), cv2.LINE_AA)
    out = _blend(image, lens, np.zeros(3), tint)
    return _blend(out, np.clip(frame, 0, 1), np.array([20.0, 18.0, 16.0]), 1.0)


def beard(image: np.ndarray, face: Face, seed: int = 0) -> np.ndarray:
    """A full dark beard: the jaw below the mouth and a moustache over the upper lip, in a coarse
    hair texture; the lips stay bare."""
    h, w = image.shape[:2]
    io = face.interocular
    jaw = face.points(JAW)
    mouth_centre = face.mouth_center[:2]
    region = np.zeros((h, w), np.float32)
    upper = np.array([[p[0], mouth_centre[1] - 0.25 * io] for p in jaw[[0, -1]]])
    cv2.fillPoly(region, [np.round(np.vstack([jaw, upper[::-1]])).astype(np.int32)], 1.0, cv2.LINE_AA)
    lips = np.vstack([face.points(LIPS_OUTER_UPPER), face.points(LIPS_OUTER_LOWER)[::-1]])
    bare = np.zeros_like(region)
    cv2.fillPoly(bare, [np.round(lips).astype(np.int32)], 1.0, cv2.LINE_AA)
    bare = cv2.dilate(bare, np.ones((3, 3), np.uint8), iterations=max(1, round(0.03 * io)))
    # Between the nose and the upper lip only a moustache: keep the cheeks above it bare.
    nose_y = face.landmarks[1, 1]
    cheeks = np.zeros_like(region)
    cheeks[: max(0, int(nose_y + 0.12 * io))] = 1.0
    mask = _feathered(np.clip(region - bare - cheeks, 0, 1), max(1.0, 0.03 * io))
    rng = np.random.default_rng(seed)
    hair = rng.normal(0.0, 1.0, (h, w)).astype(np.float32)
    hair = cv2.GaussianBlur(hair, (0, 0), 0.6) * 18.0 + cv2.blur(hair, (1, 7)) * 14.0
    colour = np.stack([48 + hair, 34 + hair * 0.8, 24 + hair * 0.6], -1)
    return _blend(image, mask, colour, 0.9)


def hand_over_mouth(image: np.ndarray, face: Face) -> np.ndarray:
    """A skin-toned shape (a hand, a microphone) covering the mouth and chin."""
    io = face.interocular
    c = face.mouth_center[:2] + np.array([0.0, 0.15 * io])
    mask = np.zeros(image.shape[:2], np.float32)
    cv2.ellipse(mask, (round(c[0]), round(c[1])), (round(0.7 * io), round(0.45 * io)), 0, 0, 360, 1.0, -1, cv2.LINE_AA)
    skin = np.median([image[y - 2:y + 3, x - 2:x + 3].reshape(-1, 3) for x, y in
                      np.round(face.points(CHEEKBONES)).astype(int)], axis=(0, 1))
    return _blend(image, _feathered(mask, 2.0), skin, 1.0)


def microphone(image: np.ndarray, face: Face) -> np.ndarray:
    """A dark grilled microphone head held before the mouth: a cover with detail of its own."""
    io = face.interocular
    c = np.round(face.mouth_center[:2] + np.array([0.0, 0.1 * io])).astype(int)
    mask = np.zeros(image.shape[:2], np.float32)
    cv2.ellipse(mask, (int(c[0]), int(c[1])), (round(0.45 * io), round(0.55 * io)), 0, 0, 360, 1.0, -1, cv2.LINE_AA)
    handle = np.round([[c[0] - 0.12 * io, c[1]], [c[0] + 0.12 * io, c[1]], [c[0] + 0.09 * io, c[1] + 2.2 * io],
                       [c[0] - 0.09 * io, c[1] + 2.2 * io]]).astype(np.int32)
    cv2.fillConvexPoly(mask, handle, 1.0, cv2.LINE_AA)
    grille = np.full((*image.shape[:2], 3), (45, 45, 48), np.float32)
    for k in range(-4, 5):  # the grille's wires
        y = round(c[1] + k * 0.12 * io)
        cv2.line(grille, (round(c[0] - 0.5 * io), y), (round(c[0] + 0.5 * io), y), (85, 85, 90), 1, cv2.LINE_AA)
    return _blend(image, _feathered(mask, 1.0), grille, 1.0)


def side_light(image: np.ndarray, face: Face, low: float = 0.3) -> np.ndarray:
    """Hard light from the subject's left: the image's left side falls to ``low`` of its brightness."""
    ramp = np.linspace(low, 1.0, image.shape[1], dtype=np.float32)[None, :, None]
    return np.clip(image.astype(np.float32) * ramp + 0.5, 0, 255).astype(np.uint8)


def dark(image: np.ndarray, face: Face) -> np.ndarray:
    """An underexposed photo (gamma 2.2 on the linear level, about a third of the brightness)."""
    return np.clip(255.0 * (image / 255.0) ** 2.2 + 0.5, 0, 255).astype(np.uint8)


def grey(image: np.ndarray, face: Face) -> np.ndarray:
    """A black-and-white photo."""
    g = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    return np.repeat(g[..., None], 3, axis=2)


def tilted(image: np.ndarray, face: Face, degrees: float = 20.0) -> np.ndarray:
    """The head tilted in the picture's plane by ``degrees`` (about the face's centre)."""
    centre = tuple(float(v) for v in face.xy.mean(0))
    m = cv2.getRotationMatrix2D(centre, degrees, 1.0)
    return cv2.warpAffine(image, m, image.shape[1::-1], flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def mirrored(image: np.ndarray, face: Face) -> np.ndarray:
    return np.ascontiguousarray(image[:, ::-1])


def scaled(image: np.ndarray, face: Face, scale: float = 0.5) -> np.ndarray:
    """The whole picture at ``scale`` of its size (a lower- or higher-resolution photo)."""
    w, h = round(image.shape[1] * scale), round(image.shape[0] * scale)
    return cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)


VARIANTS: tuple[Variant, ...] = (
    Variant("original", "the portrait as it is", lambda image, face: image.copy()),
    Variant("mirror", "flipped left to right", mirrored),
    Variant("grey", "black and white", grey),
    Variant("dark", "underexposed (gamma 2.2)", dark),
    Variant("side light", "one side at 30% brightness", side_light),
    Variant("tilt 20°", "head tilted 20° in the picture's plane", tilted),
    Variant("double size", "the photo at twice its size (1024 px)", lambda image, face: scaled(image, face, 2.0)),
    Variant("half size", "the photo at half its size (256 px)", scaled),
    Variant("glasses", "round dark-rimmed glasses, clear lenses", glasses),
    Variant("sunglasses", "the same frames, dark lenses", lambda image, face: glasses(image, face, tint=0.85)),
    Variant("beard", "full dark beard and moustache, lips bare", beard),
    Variant("hand", "a skin-toned hand over the mouth and chin", hand_over_mouth),
    Variant("microphone", "a dark grilled microphone before the mouth", microphone),
)


def make_variants(image: np.ndarray, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """Each variant of ``image`` by name (all, or ``names``), placed by the face mesh of ``image``."""
    face = find_face(image)
    chosen = [v for v in VARIANTS if names is None or v.name in names]
    return {v.name: v.draw(image, face) for v in chosen}


def evaluate_variants(pipe: Any, image: np.ndarray, clips: int = 1, seed: int = 0, names: list[str] | None = None,
                      log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One row per variant: refused (with the reason), or its held-out lip sync, upper-face SSIM and seams."""
    from engine.eval.photo import evaluate_photo_clips

    rows = []
    what = {v.name: v.what for v in VARIANTS}
    for name, picture in make_variants(image, names).items():
        row: dict[str, Any] = {"variant": name, "what": what[name], "size": list(picture.shape[:2])}
        t0 = time.perf_counter()
        try:
            photo = photo_avatar(picture)
        except FaceError as exc:
            row["refused"] = exc.reason
            log(f"{name}: refused: {exc.reason}")
            rows.append(row)
            continue
        row["eyes_px"] = round(find_face(picture).interocular, 1)
        try:
            scores = evaluate_photo_clips(pipe, photo, clips, seed, log=lambda _: None)
        except ValueError as exc:  # the face mesh loses the face on a generated frame
            row["failed"] = str(exc)
            log(f"{name}: failed: {exc}")
            rows.append(row)
            continue
        row.update(lip_sync_r=scores["lip_sync"]["pearson_r"], best_lag=scores["lip_sync"]["best_lag"],
                   upper_face_ssim=scores["upper_face_ssim_mean"], upper_face_ssim_min=scores["upper_face_ssim_min"],
                   seam_ratio=scores["seams"]["open_over_closed"], fps=scores["fps"],
                   seconds=time.perf_counter() - t0)
        log(f"{name}: r={row['lip_sync_r']:.3f} lag {row['best_lag']:+d} ssim={row['upper_face_ssim']:.3f} "
            f"seams={row['seam_ratio']:.3f}")
        rows.append(row)
    return rows


def format_variants(rows: list[dict[str, Any]]) -> str:
    """A markdown table of ``evaluate_variants``' rows."""
    lines = ["| variant | what | result | lip sync r (lag) | upper-face SSIM (min frame) | seams |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "refused" in r or "failed" in r:
            verdict = f"refused: {r['refused']}" if "refused" in r else f"failed: {r['failed']}"
            lines.append(f"| {r['variant']} | {r['what']} | {verdict} | – | – | – |")
        else:
            lines.append(f"| {r['variant']} | {r['what']} | animated | {r['lip_sync_r']:.3f} ({r['best_lag']:+d}) | "
                         f"{r['upper_face_ssim']:.3f} ({r['upper_face_ssim_min']:.3f}) | {r['seam_ratio']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.eval.variants",
                                     description="photo avatars of variations of one photo, scored on held-out speech")
    parser.add_argument("--clips", type=int, default=1, help="held-out clips per variant")
    parser.add_argument("--only", default=None, help="comma-separated variant names")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--card", action="store_true", help="record in the bundled model card")
    parser.add_argument("--save", default=None, metavar="DIR", help="write each variant as a PNG here")
    args = parser.parse_args(argv)
    import torch
    from skimage import data

    from engine.pipeline import Pipeline

    torch.set_num_threads(args.threads)
    image = np.ascontiguousarray(data.astronaut())
    names = args.only.split(",") if args.only else None
    if args.save:
        from PIL import Image

        Path(args.save).mkdir(parents=True, exist_ok=True)
        for name, picture in make_variants(image, names).items():
            Image.fromarray(picture).save(Path(args.save) / f"{name.replace(' ', '_').replace('°', '')}.png")
    pipe = Pipeline.from_config("tiny", threads=args.threads).preset(Preset.FAST)
    rows = evaluate_variants(pipe, image, args.clips, names=names)
    print(format_variants(rows))
    if args.card:
        from engine.models import WEIGHTS_DIR

        path = WEIGHTS_DIR / "tiny" / "model_card.json"
        card = json.loads(path.read_text())
        command = "python -m engine.eval.variants --card" + (f" --clips {args.clips}" if args.clips != 1 else "")
        if names:  # the other variants' rows stay as recorded
            recorded = card.get("evaluation", {}).get("photo_variants", {}).get("rows", [])
            rows = list(({r["variant"]: r for r in recorded} | {r["variant"]: r for r in rows}).values())
        card.setdefault("evaluation", {})["photo_variants"] = {"image": "skimage.data.astronaut", "clips": args.clips,
                                                               "command": command, "rows": rows}
        path.write_text(json.dumps(card, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
