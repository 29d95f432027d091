"""A person's short video made their avatar: ``enroll(path) -> (PhotoAvatar, EnrollReport)``.

Two passes over the video. The first reads a frame every ``1 / SAMPLE_FPS`` seconds, finds
and meshes the face on it (the project's face detector and mesh) and keeps only numbers: the
landmarks, how many faces, the turn, the face's size and light, the mouth's opening, width and
sharpness. From those it refuses footage that cannot make an avatar (one line each: too short,
no face, several faces, too small, turned away, too dark, mouth covered), picks the rest frame
(lips closed, facing the camera, eyes open) and, for each opening and width of the mouth the
footage shows, its sharpest frame. The second pass decodes again and cuts those frames' mouths
out, aligned to the rest frame by the face above the mouth (``engine.face.footage``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np

from engine.face.checks import MAX_YAW_DEGREES, MIN_INTEROCULAR, FaceError, estimate_yaw
from engine.face.crop import crop_face
from engine.face.detect import detect_faces
from engine.face.footage import (
    OPENING_STEP,
    PATCH_EXTENT,
    RING,
    MouthBank,
    bank_from_entries,
    opening,
    width_bin,
    width_ratio,
)
from engine.face.landmarks import (
    FACE_OVAL,
    LEFT_EYE_LOWER,
    LEFT_EYE_UPPER,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    MIN_PRESENCE,
    NOSE_TIP,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
    Face,
    eye_gap,
    face_landmarks,
)
from engine.face.occlusion import mouth_visibility
from engine.face.rig import JAW_SCALE
from engine.photo.avatar import PHOTO_SIZE, PhotoAvatar

MIN_SECONDS, MAX_SECONDS = 10.0, 300.0
MAX_BYTES = 200 * 1024 * 1024
SAMPLE_FPS = 12.5
MAX_SIDE = 1280  # frames are read at most this large (a 4K clip is no better for a 512² avatar)
# What a clip's header may declare, read before any frame is decoded: a frame past these is
# refused, so no upload makes the decoder hold frames of any size it likes.
MAX_INPUT_SIDE = 4096
MAX_INPUT_PIXELS = 4096 * 2160
MAX_FPS = 120.0
MIN_SHARE = 0.5  # a check passes when it holds on at least this share of the frames
MIN_FACE_LIGHT = 45.0  # the face's mean luma below this is too dark to take colours from
# The driver face's head turn as its photo sessions read it (yaw, standard deviation over three
# held-out clips of the tiny engine: 1.5 degrees): a person who sways more or less than this moves
# their avatar's head that much more or less, within SWAY_RANGE.
DRIVER_SWAY_DEGREES = 1.5
SWAY_RANGE = (0.5, 2.0)
Progress = Callable[[float, str], None]


class EnrollError(ValueError):
    """Footage that cannot make an avatar; ``reason`` is one line for a person."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class EnrollTimeout(EnrollError):
    """The enrolment ran past its wall-clock bound (its deadline): it stopped where it was."""


@dataclass(frozen=True)
class VideoHeader:
    """What a clip's container declares of its video stream, read without decoding a frame
    (``fps`` and ``seconds`` None where the container does not say)."""

    width: int
    height: int
    fps: float | None
    seconds: float | None
    codec: str


@dataclass(frozen=True)
class EnrollReport:
    """What enrolment found: for the person enrolling and for the store's listing."""

    seconds: float
    frames_read: int
    frames_used: int
    entries: int  # mouths kept
    coverage: float  # share of the jaw's travel the person's own mouth serves
    widest_opening: float  # the widest opening the footage showed, over the rest mouth width
    blinks_per_minute: float
    sway_degrees: float  # the head's turn, standard deviation
    bank_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Frame:
    index: int
    landmarks: np.ndarray
    opening: float
    width: float
    yaw: float
    sharpness: float


def _open(path: Path):
    """The container at ``path``, its streams read from the header: the probe that fills in what the
    header leaves out skips every frame (``skip_frame``), so opening never decodes one. Formats that
    declare no stream before that probe (MPEG-TS/PS) are refused, as they would be decoded to open."""
    import av

    try:
        return av.open(str(path), stream_options=[{"skip_frame": "all"}])
    except (av.error.FFmpegError, OSError) as exc:
        raise EnrollError(f"not a video ({exc.__class__.__name__})") from None
    except ValueError:
        raise EnrollError("not a supported container: send an MP4, MOV, WebM or MKV file") from None


def _header(container) -> VideoHeader:
    if not container.streams.video:
        raise EnrollError("not a video: the file has no video stream")
    stream = container.streams.video[0]
    rate = stream.average_rate or stream.guessed_rate
    fps = float(rate) if rate else None
    if container.duration:
        seconds = container.duration / 1e6
    elif stream.duration and stream.time_base:
        seconds = float(stream.duration * stream.time_base)
    else:
        seconds = stream.frames / fps if stream.frames and fps else None
    return VideoHeader(stream.codec_context.width, stream.codec_context.height, fps, seconds,
                       stream.codec_context.name)


def _check_header(header: VideoHeader) -> None:
    """``EnrollError`` for a header that declares too large a frame, too high a rate, or a length
    outside 10 s .. 5 min."""
    w, h = header.width, header.height
    if w <= 0 or h <= 0:
        raise EnrollError("not a video: the video stream declares no frame size")
    if max(w, h) > MAX_INPUT_SIDE or w * h > MAX_INPUT_PIXELS:
        raise EnrollError(f"too large: {w}×{h} frames, at most {MAX_INPUT_SIDE} px a side and "
                          f"{MAX_INPUT_PIXELS / 1e6:.1f} Mpixel")
    if header.fps is not None and header.fps > MAX_FPS:
        raise EnrollError(f"frame rate too high: {header.fps:.0f} fps, at most {MAX_FPS:.0f}")
    if header.seconds is not None:
        if header.seconds < MIN_SECONDS:
            raise EnrollError(_too_short(header.seconds))
        if header.seconds > MAX_SECONDS:
            raise EnrollError(f"too long: {header.seconds:.0f} s of video, at most {MAX_SECONDS:.0f} s")


def _too_short(seconds: float) -> str:
    return f"too short: {seconds:.1f} s of video, at least {MIN_SECONDS:.0f} s needed"


def probe(path: str | Path) -> VideoHeader:
    """The clip's video stream as its header declares it (frame size, rate, length, codec), no frame
    decoded; ``EnrollError`` for a file that is not a video or declares what enrolment refuses."""
    with _open(Path(path)) as container:
        header = _header(container)
    _check_header(header)
    return header


def _check_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise EnrollTimeout("timeout: the enrolment took too long; send a shorter or smaller clip")


def _frames(path: Path, progress: Progress | None,
            deadline: float | None = None) -> Iterator[tuple[int, float, np.ndarray]]:
    """(sample index, time, RGB at most ``MAX_SIDE``) of the frames one every ``1 / SAMPLE_FPS`` s;
    ``EnrollError`` for a file that is not a video or one too long, ``EnrollTimeout`` past
    ``deadline`` (``time.monotonic``). The header is checked before any frame is decoded; decoders
    that can (MJPEG and the like) decode at a reduced size, the others' frames are scaled and
    converted in one step, and frames between samples are never converted."""
    import av

    with _open(path) as container:
        header = _header(container)
        _check_header(header)
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        scale = min(1.0, MAX_SIDE / max(header.width, header.height))
        if scale < 1:
            stream.codec_context.options = {"lowres": str(min(3, int(math.log2(1 / scale))))}
        size = max(1, round(header.width * scale)), max(1, round(header.height * scale))
        length = header.seconds
        next_t, k = 0.0, 0
        try:
            for frame in container.decode(stream):
                _check_time(deadline)
                if frame.time is None:
                    continue
                if frame.time > MAX_SECONDS:
                    raise EnrollError(f"too long: over {MAX_SECONDS:.0f} s of video")
                if frame.time + 1e-6 < next_t:
                    continue
                if (frame.width, frame.height) == size:
                    rgb = frame.to_ndarray(format="rgb24")
                else:
                    rgb = frame.to_ndarray(width=size[0], height=size[1], format="rgb24", interpolation="AREA")
                yield k, float(frame.time), rgb
                if progress and length:
                    progress(min(frame.time / length, 1.0), "reading")
                k += 1
                next_t = k / SAMPLE_FPS
        except av.error.FFmpegError as exc:
            raise EnrollError(f"not a readable video ({exc.__class__.__name__})") from None


def _stable_points(face: Face) -> np.ndarray:
    """Landmarks above the nose tip that neither blink nor speak: the frame is aligned on them."""
    lm = face.landmarks
    lids = set(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER + LEFT_EYE_UPPER + LEFT_EYE_LOWER)
    return np.array([i for i in range(len(lm)) if lm[i, 1] < lm[NOSE_TIP, 1] and i not in lids])


def _sharpness(rgb: np.ndarray, face: Face) -> float:
    pts = face.points(LIPS_INNER_UPPER + LIPS_INNER_LOWER)
    (x0, y0), (x1, y1) = np.floor(pts.min(0)).astype(int) - 4, np.ceil(pts.max(0)).astype(int) + 4
    region = rgb[max(y0, 0) : max(y1, 1), max(x0, 0) : max(x1, 1)]
    if region.size == 0:
        return 0.0
    return float(cv2.Laplacian(cv2.cvtColor(region, cv2.COLOR_RGB2GRAY), cv2.CV_32F).var())


def _face_light(rgb: np.ndarray, face: Face) -> float:
    oval = np.zeros(rgb.shape[:2], np.uint8)
    cv2.fillPoly(oval, [np.round(face.points(FACE_OVAL)).astype(np.int32)], 1)
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    return float(grey[oval > 0].mean()) if oval.any() else 0.0


def _refuse(reads: list[tuple[int, Face | None, float]], seconds: float) -> None:
    """``EnrollError`` naming the first thing wrong with the footage."""
    if seconds < MIN_SECONDS:
        raise EnrollError(_too_short(seconds))
    found = [(n, f, light) for n, f, light in reads if f is not None]
    if len(found) < MIN_SHARE * len(reads):
        raise EnrollError("no face found in most of the video: film one person facing the camera")
    if sum(n > 1 for n, _, _ in found) > MIN_SHARE * len(found):
        raise EnrollError("several faces throughout the video: film one person alone")
    if np.median([f.interocular for _, f, _ in found]) < MIN_INTEROCULAR:
        raise EnrollError(f"face too small: the eyes are less than {MIN_INTEROCULAR:.0f} px apart; film closer")
    frontal = [abs(np.degrees(estimate_yaw(f.landmarks))) <= MAX_YAW_DEGREES for _, f, _ in found]
    if np.mean(frontal) < MIN_SHARE:
        raise EnrollError("face turned away from the camera most of the time: look into the camera")
    if np.median([light for _, _, light in found]) < MIN_FACE_LIGHT:
        raise EnrollError("too dark: light the face")


def _rest(frames: list[_Frame]) -> _Frame:
    """Lips closed, facing the camera, eyes open: among the most closed fifth, the most frontal
    of those whose eyes are open at least as wide as the footage's median."""
    openings = np.array([f.opening for f in frames])
    closed = [f for f in frames if f.opening <= np.percentile(openings, 20) + 1e-9]
    eyes = np.array([eye_gap(f.landmarks) / max(Face(f.landmarks).interocular, 1e-6) for f in closed])
    awake = [f for f, e in zip(closed, eyes, strict=True) if e >= np.median(eyes)] or closed
    return min(awake, key=lambda f: abs(f.yaw))


@dataclass(frozen=True)
class Scan:
    """The first pass over a video: per sampled frame, how many faces and the largest one (or
    None) with its light; the usable frames (one frontal face, large enough); the length read."""

    reads: list[tuple[int, Face | None, float]]
    frames: list[_Frame]
    seconds: float

    def openings(self) -> np.ndarray:
        """(n,) the mouth's opening on each usable frame, over that frame's own mouth width at rest
        (the widest-apart lips read as they are, before the rest frame is chosen)."""
        return np.array([f.opening for f in self.frames])


def scan(path: str | Path, progress: Progress | None = None, deadline: float | None = None) -> Scan:
    """The first pass; ``EnrollError`` for a file that is missing, too large, not a video or too long
    (``EnrollTimeout`` past ``deadline``, a ``time.monotonic`` instant)."""
    path = Path(path)
    if not path.is_file():
        raise EnrollError(f"{path}: no such file")
    if path.stat().st_size > MAX_BYTES:
        raise EnrollError(f"too large: {path.stat().st_size / 2**20:.0f} MB, at most {MAX_BYTES / 2**20:.0f} MB")
    reads: list[tuple[int, Face | None, float]] = []
    frames: list[_Frame] = []
    seconds = 0.0
    for k, t, rgb in _frames(path, progress, deadline):
        seconds = t
        boxes = detect_faces(rgb)
        face = None
        if boxes:
            face = face_landmarks(rgb, max(boxes, key=lambda b: b.width * b.height))
            if face.presence < MIN_PRESENCE:
                face = None
        reads.append((len(boxes), face, _face_light(rgb, face) if face is not None else 0.0))
        if face is None:
            continue
        yaw = float(np.degrees(estimate_yaw(face.landmarks)))
        if abs(yaw) <= MAX_YAW_DEGREES and face.interocular >= MIN_INTEROCULAR and len(boxes) == 1:
            frames.append(_Frame(k, face.landmarks, opening(face.landmarks, face.mouth_width), 0.0, yaw,
                                 _sharpness(rgb, face)))
    return Scan(reads, frames, seconds + 1 / SAMPLE_FPS if reads else 0.0)


def enroll(path: str | Path, progress: Progress | None = None,
           timeout_s: float | None = None) -> tuple[PhotoAvatar, EnrollReport]:
    """The personal avatar of the person in the video at ``path``; ``EnrollError`` says why not
    (``EnrollTimeout`` once it has run ``timeout_s``: the caller's slot is not held for good)."""
    path = Path(path)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    found = scan(path, progress, deadline)
    reads, frames, seconds = found.reads, found.frames, found.seconds
    _refuse(reads, seconds)
    if not frames:
        raise EnrollError("no frame shows one face, frontal and large enough")
    rest = _rest(frames)
    rest_width = Face(rest.landmarks).mouth_width
    for f in frames:  # openings and widths against the rest mouth, the face's size taken out
        scale = Face(rest.landmarks).interocular / max(Face(f.landmarks).interocular, 1e-6)
        f.opening = opening(f.landmarks, rest_width / scale)
        f.width = width_ratio(f.landmarks, rest_width / scale)
    best: dict[tuple[int, int], _Frame] = {}
    for f in frames:
        key = (int(round(f.opening / OPENING_STEP)), width_bin(f.width))
        if key not in best or f.sharpness > best[key].sharpness:
            best[key] = f
    wanted = {rest.index: None} | {f.index: None for f in best.values()}

    if progress:
        progress(1.0, "reading")
    picked: dict[int, np.ndarray] = {}
    for k, _, rgb in _frames(path, None, deadline):
        if k in wanted:
            picked[k] = rgb
        if len(picked) == len(wanted):
            break
    try:
        crop, face = crop_face(picked[rest.index], Face(rest.landmarks), PHOTO_SIZE)
    except FaceError as exc:  # framed too tightly: the brows or the mouth at the picture's edge
        raise EnrollError(exc.reason.replace("the photo is", "the video is").replace("a photo", "a video")) from None
    if mouth_visibility(crop, face).covered:
        raise EnrollError("the mouth is covered: film the lips in view")
    stable = _stable_points(face)
    mw = face.mouth_width
    centre = face.mouth_center
    ext_x, ext_up, ext_down = PATCH_EXTENT
    x0, y0 = int(round(centre[0] - ext_x * mw)), int(round(centre[1] - ext_up * mw))
    w, h = int(round(2 * ext_x * mw)), int(round((ext_up + ext_down) * mw))
    patches, lips, openings, widths = [], [], [], []
    for f in sorted(best.values(), key=lambda f: (f.opening, f.width)):
        m, _ = cv2.estimateAffinePartial2D(f.landmarks[stable, :2].astype(np.float32),
                                           face.landmarks[stable, :2].astype(np.float32))
        if m is None:
            continue
        to_patch = m.copy()
        to_patch[:, 2] -= (x0, y0)
        patches.append(cv2.warpAffine(picked[f.index], to_patch, (w, h), flags=cv2.INTER_LINEAR,
                                      borderMode=cv2.BORDER_REPLICATE))
        lips.append(cv2.transform(f.landmarks[None, list(RING), :2].astype(np.float32), to_patch)[0])
        openings.append(f.opening)
        widths.append(width_bin(f.width))
    rest_opening = opening(face.landmarks, mw)
    bank: MouthBank = bank_from_entries(patches, lips, openings, widths, mw, rest_opening + JAW_SCALE)
    eyes = np.array([eye_gap(f.landmarks) / max(Face(f.landmarks).interocular, 1e-6) for f in frames])
    blinks = int(np.sum((eyes[1:] < 0.5 * np.median(eyes)) & (eyes[:-1] >= 0.5 * np.median(eyes))))
    report = EnrollReport(
        seconds=round(seconds, 2), frames_read=len(reads), frames_used=len(frames), entries=len(openings),
        coverage=round(bank.coverage, 3), widest_opening=round(float(max(openings, default=0.0)), 3),
        blinks_per_minute=round(blinks / max(seconds / 60, 1e-6), 1),
        sway_degrees=round(float(np.std([f.yaw for f in frames])), 2), bank_bytes=bank.nbytes)
    if progress:
        progress(1.0, "done")
    sway = float(np.clip(report.sway_degrees / DRIVER_SWAY_DEGREES, *SWAY_RANGE))
    return PhotoAvatar(crop, face, bank, sway), report
