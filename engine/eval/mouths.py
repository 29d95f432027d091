"""How photo avatars' mouths look, on every test portrait: a contact sheet and checks that can fail.

``python -m engine.eval.mouths --sheet docs/photo_mouths.png`` draws one row per portrait
(the bundled portraits in ``engine/portraits``, the astronaut among them, sources and
licences in its ``SOURCES.md``) and one column per mouth: at rest, half open, wide open,
rounded ("oo") and a closed-lips consonant ("p", "b", "m"), the open ones while talking.
It prints the checks below per portrait. ``--avatars NAME,...`` does the same for personal
avatars from the store, their own mouths in place.

``mouth_checks`` renders a photo's rig and reads the frames back with the face mesh:

* ``rigidity``: the mouth interior of a frame with the head turned, aligned back onto the
  same opening with the head still by the moved mesh's outer lip contour, against it (SSIM): the
  teeth are the same teeth whatever the head does;
* ``brightest_over_eye_whites``: the interior's brightest pixels (99th percentile of luma)
  minus the photo's brightest eye whites or own teeth;
* ``darkest_share``: the largest share of an open mouth's interior that is near-black;
* ``chin_r``: Pearson r of the chin's drop against the lip gap over a sweep of openings;
* ``smile_eases``: for a smiling photo, the mouth corners' lift while talking over at rest.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np

from engine.eval.mesh import MeshReader
from engine.face.landmarks import (
    CHIN,
    LEFT_EYE_LOWER,
    LEFT_EYE_UPPER,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    LIPS_OUTER_LOWER,
    LIPS_OUTER_UPPER,
    MOUTH_CORNERS,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    Face,
)
from engine.face.palette import luminance
from engine.face.rig import FaceMotion, PhotoRig
from engine.photo.avatar import PhotoAvatar, photo_avatar
from engine.portraits import FOLDER, portrait_image, portrait_names

PORTRAITS_DIR = FOLDER
COLUMNS: tuple[tuple[str, FaceMotion], ...] = (
    ("rest", FaceMotion()),
    ("half open", FaceMotion(jaw_open=0.45, talking=1.0)),
    ("wide open", FaceMotion(jaw_open=1.0, talking=1.0)),
    ("rounded", FaceMotion(jaw_open=0.4, mouth_width=-1.0, talking=1.0)),
    ("closed-lips consonant", FaceMotion(press=1.0, talking=1.0)),
)
NEAR_BLACK = 25.0  # luma below this counts as near-black
THRESHOLDS = {
    "rigidity_min": 0.95,
    "brightest_over_eye_whites_max": 10.0,
    "darkest_share_max": 1 / 3,
    "chin_r_min": 0.8,
}


def portraits() -> list[tuple[str, np.ndarray]]:
    """(name, RGB image) of every bundled portrait (``engine.portraits``), the astronaut first."""
    return [(name, np.array(portrait_image(name))) for name in portrait_names()]


def _interior_mask(landmarks: np.ndarray, shape: tuple[int, int], erode: int = 2) -> np.ndarray:
    poly = np.concatenate([landmarks[list(LIPS_INNER_UPPER), :2], landmarks[list(LIPS_INNER_LOWER), :2][::-1]])
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [np.round(poly * 4).astype(np.int32)], 1, cv2.LINE_8, 2)
    if erode:
        mask = cv2.erode(mask, np.ones((2 * erode + 1,) * 2, np.uint8))
    return mask > 0


def _masked_ssim(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    _, full = structural_similarity(a, b, channel_axis=2, data_range=255, full=True, win_size=7)
    return float(full.mean(2)[mask].mean())


def _eye_whites(photo: PhotoAvatar) -> float:
    """The photo's brightest eye whites: 95th percentile of luma between the lids."""
    lm = photo.face.landmarks[:, :2]
    mask = np.zeros(photo.image.shape[:2], np.uint8)
    for up, lo in ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER), (LEFT_EYE_UPPER, LEFT_EYE_LOWER)):
        ring = np.concatenate([lm[list(up)], lm[list(lo)][::-1]])
        cv2.fillPoly(mask, [np.round(ring).astype(np.int32)], 1)
    px = luminance(photo.image[mask > 0].astype(np.float32))
    return float(np.percentile(px, 95)) if px.size else 255.0


def _lift(landmarks: np.ndarray) -> float:
    """How far the mouth corners sit above the inner lips' centre, over the interocular distance."""
    face = Face(landmarks)
    centre = landmarks[[13, 14], 1].mean()
    return float((centre - landmarks[list(MOUTH_CORNERS), 1].mean()) / max(face.interocular, 1e-6))


@dataclass(frozen=True)
class MouthChecks:
    rigidity: float
    brightest_over_eye_whites: float
    darkest_share: float
    chin_r: float
    smile: float  # how much the photo smiles (the rig's reading, 0 .. 1)
    smile_eases: float | None  # corner lift talking / at rest (None: the photo does not smile)

    def verdicts(self) -> dict[str, bool]:
        t = THRESHOLDS
        out = {"rigidity": self.rigidity >= t["rigidity_min"],
               "brightness": self.brightest_over_eye_whites <= t["brightest_over_eye_whites_max"],
               "no_void": self.darkest_share <= t["darkest_share_max"],
               "chin_follows": self.chin_r >= t["chin_r_min"]}
        if self.smile_eases is not None:
            out["smile_eases"] = self.smile_eases < 1.0
        return out


def mouth_checks(photo: PhotoAvatar, seed: int = 0) -> MouthChecks:
    """The checks above for one photo avatar (about a hundred frames rendered and read)."""
    rig = PhotoRig.from_photo(photo.image, photo.face, photo.mouths)
    read = MeshReader(photo.face.box)
    shape = photo.image.shape[:2]

    # Rigidity: the head turned and shifted, then aligned back by the lips' outer contour (the same
    # expression in both frames, at about the teeth's depth).
    around = list(LIPS_OUTER_UPPER + LIPS_OUTER_LOWER)
    scores = []
    for jaw in (0.5, 0.8, 1.0):
        still = FaceMotion(jaw_open=jaw, talking=1.0)
        a = rig.render(still)
        la = rig.moved_landmarks(still)
        for pose in (dict(yaw=0.12, tx=0.02), dict(pitch=-0.08, roll=0.06, ty=-0.015)):
            turned = FaceMotion(jaw_open=jaw, talking=1.0, **pose)
            b = rig.render(turned)
            lb = rig.moved_landmarks(turned)
            m, _ = cv2.estimateAffine2D(lb[around].astype(np.float32), la[around].astype(np.float32))
            back = cv2.warpAffine(b, m, (shape[1], shape[0]), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            mask = _interior_mask(la, shape, 3) & _interior_mask(
                np.c_[cv2.transform(lb[None, :, :2].astype(np.float32), m)[0], np.zeros(len(lb))], shape, 3)
            if mask.sum() > 50:
                scores.append(_masked_ssim(a, back, mask))
    rigidity = float(min(scores)) if scores else float("nan")

    # Brightness and voids over a sweep of openings and shapes.
    reference = _eye_whites(photo)
    if rig.palette.shows_teeth:
        reference = max(reference, float(np.percentile(
            luminance(photo.image[_interior_mask(photo.face.landmarks, shape, 0)].astype(np.float32)), 99)))
    brightest, darkest = 0.0, 0.0
    for jaw in np.linspace(0.3, 1.0, 6):
        for width in (-1.0, 0.0, 1.0):
            motion = FaceMotion(jaw_open=float(jaw), mouth_width=width, talking=1.0)
            frame = rig.render(motion)
            mask = _interior_mask(rig.moved_landmarks(motion), shape, 2)
            if mask.sum() < 30:
                continue
            lum = luminance(frame[mask].astype(np.float32))
            brightest = max(brightest, float(np.percentile(lum, 99)))
            darkest = max(darkest, float((lum < NEAR_BLACK).mean()))

    # The chin against the lip gap, read by the face mesh, over random openings, shapes and speech.
    rng = np.random.default_rng(seed)
    gaps, chins = [], []
    for _ in range(24):
        motion = FaceMotion(jaw_open=float(rng.uniform(0, 1)), mouth_width=float(rng.uniform(-1, 1)),
                            talking=float(rng.uniform(0, 1)))
        lm = read(rig.render(motion))
        io = Face(lm).interocular
        eyes = lm[list(RIGHT_EYE_UPPER + LEFT_EYE_UPPER), 1].mean()
        gaps.append((lm[14, 1] - lm[13, 1]) / io)
        chins.append((lm[CHIN, 1] - eyes) / io)
    chin_r = float(np.corrcoef(gaps, chins)[0, 1])

    eases = None
    if rig.lips.smile > 0.3:
        # The same openings talking and silent: a photo whose rest closes its lips opens from there.
        silent = np.mean([_lift(read(rig.render(FaceMotion(jaw_open=j)))) for j in (0.0, 0.2, 0.4)])
        talking = np.mean([_lift(read(rig.render(FaceMotion(jaw_open=j, talking=1.0)))) for j in (0.0, 0.2, 0.4)])
        eases = float(talking / silent) if abs(silent) > 1e-6 else None
    return MouthChecks(rigidity=rigidity, brightest_over_eye_whites=brightest - reference, darkest_share=darkest,
                       chin_r=chin_r, smile=float(rig.lips.smile), smile_eases=eases)


def _tile(frame: np.ndarray, photo: PhotoAvatar, width: int) -> np.ndarray:
    """The lower face: from under the eyes to below the chin, centred on the mouth."""
    lm = photo.face.landmarks[:, :2]
    io = Face(photo.face.landmarks).interocular
    cx, cy = lm[[13, 14]].mean(0)
    w, h = 2.0 * io, 1.6 * io
    x0, y0 = int(round(cx - w / 2)), int(round(cy - 0.42 * h))
    s = frame.shape[0]
    x0, y0 = min(max(x0, 0), s - int(w)), min(max(y0, 0), s - int(h))
    crop = frame[y0 : y0 + int(h), x0 : x0 + int(w)]
    return cv2.resize(crop, (width, int(round(width * h / w))), interpolation=cv2.INTER_CUBIC)


def _label(text: str, width: int, height: int = 30) -> np.ndarray:
    strip = np.full((height, width, 3), 255, np.uint8)
    cv2.putText(strip, text, (8, height - 9), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 1, cv2.LINE_AA)
    return strip


def sheet(path: Path, photos: list[tuple[str, PhotoAvatar]], width: int = 256) -> None:
    """The contact sheet: a row per photo (its name on a strip above), a column per ``COLUMNS`` mouth."""
    rows = [np.concatenate([_label(name, width) for name, _ in COLUMNS], axis=1)]
    for name, photo in photos:
        rig = PhotoRig.from_photo(photo.image, photo.face, photo.mouths)
        tiles = [_tile(rig.render(motion), photo, width) for _, motion in COLUMNS]
        rows.append(_label(name, width * len(COLUMNS), 26))
        rows.append(np.concatenate(tiles, axis=1))
    from PIL import Image

    Image.fromarray(np.concatenate(rows, axis=0)).save(path, optimize=True)


def format_checks(rows: list[tuple[str, MouthChecks]]) -> str:
    lines = [f"{'portrait':<18} {'rigidity':>8} {'bright-eyes':>11} {'near-black':>10} {'chin r':>7} {'smile':>5} "
             f"{'eases':>6}"]
    for name, c in rows:
        eases = "-" if c.smile_eases is None else f"{c.smile_eases:.2f}"
        ok = "ok" if all(c.verdicts().values()) else "FAIL " + ",".join(k for k, v in c.verdicts().items() if not v)
        lines.append(f"{name:<18} {c.rigidity:8.3f} {c.brightest_over_eye_whites:11.1f} {c.darkest_share:10.3f} "
                     f"{c.chin_r:7.3f} {c.smile:5.2f} {eases:>6}  {ok}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.eval.mouths",
                                     description="contact sheet and checks of photo avatars' mouths")
    parser.add_argument("--sheet", default=None, metavar="PNG", help="write the contact sheet here")
    parser.add_argument("--no-checks", action="store_true", help="only draw the sheet")
    parser.add_argument("--json", default=None, help="write the checks as JSON")
    parser.add_argument("--avatars", default=None, metavar="NAMES",
                        help="personal avatars (avatar enroll) instead of the portraits, comma-separated")
    args = parser.parse_args(argv)
    if args.avatars:
        from engine.personal.store import AvatarStore

        store = AvatarStore()
        photos = [(name, store.load(name)) for name in args.avatars.split(",")]
    else:
        photos = [(name, photo_avatar(image)) for name, image in portraits()]
    if args.sheet:
        sheet(Path(args.sheet), photos)
        print(f"wrote {args.sheet}")
    if not args.no_checks:
        rows = [(name, mouth_checks(photo)) for name, photo in photos]
        print(format_checks(rows))
        if args.json:
            import json

            Path(args.json).write_text(json.dumps({n: asdict(c) for n, c in rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
