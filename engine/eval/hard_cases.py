"""Photos framed as real cameras frame them, made from the test portraits, and what the photo rig
does with them: a contact sheet and the checks ``make test`` asserts.

The shipped portraits are loose head-and-shoulders crops. People bring selfies, webcam frames and
frames of talking-head footage, where the face fills the picture or is cut by its edge, and photos
taken mid-word. ``hard_cases`` makes those from every portrait: tight squares with the face filling
60-90% of the side, squares cut at the chin and at the forehead, and the portrait with its mouth
open (its own rig's frame, saved as a photo); a moustache over a clean-shaven man's lip; and the
first frame of each real talking-head clip of the evaluation set.

``python -m engine.eval.hard_cases --sheet docs/photo_hard_cases.png`` draws a row per case (the
tightest crops, the chin cut, the open mouths, the moustache, the talking-head frames): the photo as
given, the rig's frame at rest, speaking, and with the head turned. It prints for every case the share of output pixels
drawn from outside the photo (over a sweep of strong motions) and the lip gap at rest against the
speaking range.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from engine.eval.mouths import portraits
from engine.face.checks import FaceError, find_face
from engine.face.landmarks import (
    FACE_OVAL,
    LIPS_OUTER_UPPER,
    LOWER_LIP_CENTER,
    MOUTH_CORNERS,
    UPPER_LIP_CENTER,
    Face,
)
from engine.face.rig import FaceMotion, PhotoRig
from engine.photo.avatar import PhotoAvatar, photo_avatar

TIGHT = (("fill60", 0.6, None), ("fill75", 0.75, None), ("fill90", 0.9, None),
         ("cut-chin", 0.8, "chin"), ("cut-forehead", 0.8, "forehead"))
# Strong motions (beyond what the driver usually reads): every corner of the head's range, mouth shut
# and wide open.
NOSE_BASE = 2  # the face mesh's point under the nose (subnasale)
SWEEP = tuple(FaceMotion(jaw_open=j, yaw=y, pitch=p, roll=0.1, tx=tx, ty=0.03, talking=1.0)
              for j in (0.0, 1.0) for y in (-0.2, 0.2) for p in (-0.1, 0.1) for tx in (-0.03, 0.03))
SHEET_CASES = ("fill90", "cut-chin", "open-mouth", "moustache", "talking-clip")  # the rows of the contact sheet
SHEET_COLUMNS: tuple[tuple[str, FaceMotion], ...] = (
    ("rest", FaceMotion()),
    ("speaking", FaceMotion(jaw_open=0.6, talking=1.0)),
    ("turned, open", FaceMotion(jaw_open=0.5, yaw=0.15, pitch=0.05, tx=0.02, talking=1.0)),
)


def tight_crop(image: np.ndarray, face: Face, fill: float, cut: str | None = None) -> np.ndarray:
    """A square of ``image`` in which the face oval's larger side is ``fill`` of the side (as far as
    the photo allows), centred on the face, or with its edge through the chin (``cut="chin"``) or the
    forehead (``"forehead"``)."""
    oval = face.points(FACE_OVAL)
    lo, hi = oval.min(0), oval.max(0)
    h, w = image.shape[:2]
    side = min(int(round(float((hi - lo).max()) / fill)), h, w)
    x0, y0 = (lo + hi) / 2 - side / 2
    if cut == "chin":
        y0 = hi[1] - 0.93 * side
    elif cut == "forehead":
        y0 = lo[1] + 0.07 * side
    x0 = min(max(int(round(x0)), 0), w - side)
    y0 = min(max(int(round(y0)), 0), h - side)
    return np.ascontiguousarray(image[y0 : y0 + side, x0 : x0 + side])


def open_mouth_photo(image: np.ndarray, jaw_open: float = 0.7) -> np.ndarray:
    """The portrait taken mid-word: its own rig's frame with the mouth open, as a new photo."""
    photo = photo_avatar(image)
    return PhotoRig.from_photo(photo.image, photo.face).render(FaceMotion(jaw_open=jaw_open, talking=1.0))


def moustached(image: np.ndarray, donor: np.ndarray) -> np.ndarray:
    """``image`` with the moustache of the man in ``donor`` over its upper lip: his hair between the
    nose and the lip, carried over by the mouth corners and the nose's base, feathered in."""
    face, hairy = find_face(image), find_face(donor)

    def anchors(f: Face) -> np.ndarray:
        return np.float32(f.landmarks[[MOUTH_CORNERS[0], MOUTH_CORNERS[1], NOSE_BASE], :2])

    m = cv2.getAffineTransform(anchors(hairy), anchors(face))
    hair = cv2.warpAffine(donor, m, (image.shape[1], image.shape[0]), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT)
    lm = face.landmarks[:, :2]
    reach = 0.15 * face.mouth_width
    poly = np.concatenate([lm[list(LIPS_OUTER_UPPER)] + [0, 0.05 * reach],
                           [lm[MOUTH_CORNERS[1]] + [reach, -reach], lm[NOSE_BASE],
                            lm[MOUTH_CORNERS[0]] + [-reach, -reach]]])
    mask = np.zeros(image.shape[:2], np.float32)
    cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1.0)
    mask = cv2.GaussianBlur(mask, (0, 0), 0.03 * face.mouth_width)[..., None]
    return np.clip(image * (1 - mask) + hair * mask + 0.5, 0, 255).astype(np.uint8)


def hard_cases() -> list[tuple[str, np.ndarray]]:
    """(name, RGB photo) of every case: each portrait's tight crops and its open-mouth photo, then a
    clean-shaven portrait given the bearded one's moustache."""
    cases = []
    shipped = portraits()
    for name, image in shipped:
        face = find_face(image)
        cases += [(f"{name} {label}", tight_crop(image, face, fill, cut)) for label, fill, cut in TIGHT]
        cases.append((f"{name} open-mouth", open_mouth_photo(image)))
    by_name = dict(shipped)
    shaven, bearded = by_name["christophe_henner"], by_name["filippo_giunchedi"]
    cases.append(("christophe_henner moustache", moustached(shaven, bearded)))
    return cases + talking_clip_frames()


def talking_clip_frames() -> list[tuple[str, np.ndarray]]:
    """(name, RGB frame): the first frame of each real talking-head clip of ``engine.eval.real``
    (the held-out speakers' too: nothing about the framing is tuned on them), as a talking-head
    dataset frames a face, often mid-word."""
    import av

    from engine.eval.real import real_clips

    frames = []
    for path in real_clips():
        with av.open(str(path)) as container:
            first = next(container.decode(video=0)).to_ndarray(format="rgb24")
        frames.append((f"{path.stem} talking-clip", np.ascontiguousarray(first)))
    return frames


def outside_share(rig: PhotoRig, motions: tuple[FaceMotion, ...] = SWEEP) -> float:
    """The largest share, over ``motions``, of output pixels whose source lies more than half a pixel
    outside the photo crop (the crop itself lies inside the photo: ``crop_face`` refuses otherwise)."""
    worst = 0.0
    for motion in motions:
        m = rig.source_map(motion)
        worst = max(worst, float(((m < -0.5) | (m > rig.size - 0.5)).any(-1).mean()))
    return worst


def lip_gap(landmarks: np.ndarray) -> float:
    """The inner lips' gap at the middle, in pixels."""
    return float(np.linalg.norm(landmarks[LOWER_LIP_CENTER, :2] - landmarks[UPPER_LIP_CENTER, :2]))


@dataclass(frozen=True)
class CaseFigures:
    outside: float  # share of output pixels from outside the photo, worst over ``SWEEP``
    rest_gap: float  # the lip gap in silence over the gap at jaw_open = 1 (the speaking range)


def case_figures(photo: PhotoAvatar) -> CaseFigures:
    rig = PhotoRig.from_photo(photo.image, photo.face, photo.mouths)
    rest = lip_gap(rig.moved_landmarks(FaceMotion()))
    wide = lip_gap(rig.moved_landmarks(FaceMotion(jaw_open=1.0, talking=1.0)))
    return CaseFigures(outside=outside_share(rig), rest_gap=rest / max(wide, 1e-6))


def _label(text: str, width: int, height: int = 24) -> np.ndarray:
    strip = np.full((height, width, 3), 255, np.uint8)
    cv2.putText(strip, text, (6, height - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return strip


def sheet(path: Path, cases: list[tuple[str, np.ndarray]], width: int = 128) -> None:
    """A row per case: the photo as given, then the rig's frame per column."""
    rows = [np.concatenate([_label("photo", width)] + [_label(n, width) for n, _ in SHEET_COLUMNS], axis=1)]
    for name, image in cases:
        given = cv2.resize(image, (width, width), interpolation=cv2.INTER_AREA)
        try:
            photo = photo_avatar(image)
        except FaceError as e:
            tiles = [given] + [_label(e.reason[:24], width, width)] * len(SHEET_COLUMNS)
        else:
            rig = PhotoRig.from_photo(photo.image, photo.face)
            tiles = [given] + [cv2.resize(rig.render(m), (width, width), interpolation=cv2.INTER_AREA)
                               for _, m in SHEET_COLUMNS]
        rows.append(_label(name, width * (len(SHEET_COLUMNS) + 1), 22))
        rows.append(np.concatenate(tiles, axis=1))
    from PIL import Image

    Image.fromarray(np.concatenate(rows, axis=0)).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.eval.hard_cases", description=__doc__.split("\n\n")[0])
    p.add_argument("--sheet", type=Path, help="write the contact sheet (PNG) here")
    args = p.parse_args(argv)
    cases = hard_cases()
    print(f"{'case':<32} {'size':>9} {'outside':>8} {'rest gap':>9}")
    for name, image in cases:
        try:
            f = case_figures(photo_avatar(image))
        except FaceError as e:
            print(f"{name:<32} {image.shape[1]:>4}x{image.shape[0]:<4} refused: {e.reason}")
            continue
        print(f"{name:<32} {image.shape[1]:>4}x{image.shape[0]:<4} {f.outside:>8.4f} {f.rest_gap:>9.2f}")
    if args.sheet:
        sheet(args.sheet, [(name, image) for name, image in cases if name.endswith(SHEET_CASES)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
