"""Synthetic footage of a known face with a known mouth track, for enrolment tests.

A real portrait's rig (``PhotoRig``) speaks a scripted track (openings, widths, blinks, a little
sway) and each frame's open mouth carries a mark whose green level is the frame's opening:
an interior a personal session shows can be traced back to the footage frame it came from.
The frames are encoded with a real H.264 encoder (PyAV) into an MP4.
"""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np

from engine.face.landmarks import LIPS_INNER_LOWER, LIPS_INNER_UPPER
from engine.face.rig import FaceMotion, PhotoRig

FPS = 25
MARK = 5  # half-size of the mark in pixels


def portrait_rig(name: str) -> PhotoRig:
    """The photo rig of one of the test portraits (``engine/portraits``): the person filmed."""
    from engine.eval.mouths import portraits
    from engine.photo.avatar import photo_avatar

    photo = photo_avatar(dict(portraits())[name])
    return PhotoRig.from_photo(photo.image, photo.face)


def mouth_centre(landmarks: np.ndarray) -> np.ndarray:
    return landmarks[list(LIPS_INNER_UPPER) + list(LIPS_INNER_LOWER), :2].mean(0)


def mark_level(frame: np.ndarray, landmarks: np.ndarray) -> float:
    """The mark's green level read at the interior's centre (0 .. 1), or -1 where it is not red-free."""
    x, y = np.round(mouth_centre(landmarks)).astype(int)
    px = frame[y - 2 : y + 3, x - 2 : x + 3].reshape(-1, 3).astype(float).mean(0)
    return float(px[1] / 255.0) if px[2] > 150 and px[0] < 80 else -1.0


def jaw_track(seconds: float, top: float = 1.0, seed: int = 0) -> np.ndarray:
    """Openings 0 .. ``top`` per frame: syllables of varying height with pauses."""
    rng = np.random.default_rng(seed)
    n = int(seconds * FPS)
    t = np.arange(n) / FPS
    track = np.clip(np.sin(2 * np.pi * 2.1 * t) * 0.5 + 0.5, 0, 1) * (0.35 + 0.65 * (0.5 + 0.5 * np.sin(0.7 * t)))
    track *= (np.sin(2 * np.pi * 0.23 * t + rng.uniform(0, 6)) > -0.6)  # pauses
    return np.clip(track * top, 0, top)


_RENDERED: dict[tuple[int, bytes, bool], list[np.ndarray]] = {}


def talking_frames(rig: PhotoRig, jaw: np.ndarray, marked: bool = True) -> list[np.ndarray]:
    """The rig's frames speaking ``jaw`` (open mouths marked unless not ``marked``), rendered once
    per rig, track and marking: several footage variants of one track share them."""
    key = (id(rig), jaw.tobytes(), marked)
    if key not in _RENDERED:
        frames = []
        for k, j in enumerate(jaw):
            motion = FaceMotion(jaw_open=float(j), mouth_width=float(0.6 * np.sin(0.9 * k / FPS)),
                                blink=1.0 if k % 90 in (40, 41) else 0.0, yaw=0.04 * np.sin(0.5 * k / FPS),
                                talking=1.0)
            frame = rig.render(motion)
            if marked and j > 0.15:
                x, y = np.round(mouth_centre(rig.moved_landmarks(motion))).astype(int)
                frame[y - MARK : y + MARK, x - MARK : x + MARK] = (0, int(round(255 * j)), 255)
            frames.append(frame)
        _RENDERED[key] = frames
    return _RENDERED[key]


def write_footage(path: Path, rig: PhotoRig, jaw: np.ndarray, canvas: int = 640, faces: int = 1,
                  brightness: float = 1.0, marked: bool = True, scale: float = 1.0) -> np.ndarray:
    """Encode the rig speaking ``jaw`` into ``path`` (H.264 MP4; open mouths marked unless not
    ``marked``; the face ``scale`` times its size; a ``canvas`` smaller than the frames shows their
    middle, as a tightly framed camera would); -> the (n,) openings written."""
    s = int(round(rig.size * scale))
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width = stream.height = canvas
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "12", "preset": "ultrafast"}
        for frame in talking_frames(rig, jaw, marked):
            if scale != 1.0:
                frame = cv2.resize(frame, (s, s), interpolation=cv2.INTER_AREA)
            if s > canvas:  # framed tighter than the rig's frames: their middle fills the picture
                c = (s - canvas) // 2
                frame = frame[c : c + canvas, c : c + canvas]
            big = np.full((canvas, canvas, 3), 90, np.uint8)
            o = max((canvas - s) // 2, 0)
            big[o : o + frame.shape[0], o : o + frame.shape[1]] = frame
            if faces > 1:  # a second, smaller copy of the face in a corner
                small = frame[::2, ::2]
                big[: small.shape[0], : small.shape[1]] = small
            big = np.clip(big.astype(np.float32) * brightness, 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(big, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return jaw


def write_long_blank(path: Path, seconds: float) -> None:
    """A tiny video ``seconds`` long (one 64² grey frame a second): long without costing much to make."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=1)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for _ in range(int(seconds)):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.full((64, 64, 3), 90, np.uint8), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
