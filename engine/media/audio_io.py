"""Decode any common audio file (wav/flac/mp3/ogg/...) to mono float32 at a given rate."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np


class MediaError(ValueError):
    """Input media that cannot be used; the message is meant for the user."""


def load_audio(path: str | Path, sample_rate: int) -> np.ndarray:
    path = Path(path)
    if not path.exists():
        raise MediaError(f"audio file not found: {path}")
    if path.is_dir():
        raise MediaError(f"audio path is a directory: {path}")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as exc:
        raise MediaError(f"not a readable audio file: {path} ({exc.__class__.__name__})") from None
    with container:
        if not container.streams.audio:
            raise MediaError(f"no audio stream in {path}")
        # Down-mix by averaging the channels: libswresample's float stereo->mono matrix
        # adds both at -3 dB, so a centred voice came out sqrt(2) louder and clipped.
        layout = container.streams.audio[0].layout
        resampler = av.AudioResampler(format="fltp", layout=layout if layout.nb_channels else "mono",
                                      rate=sample_rate)
        parts: list[np.ndarray] = []
        try:
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().mean(axis=0))
            for out in resampler.resample(None):
                parts.append(out.to_ndarray().mean(axis=0))
        except av.error.FFmpegError as exc:
            raise MediaError(f"cannot decode audio in {path}: {exc}") from None
    pcm = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    if pcm.size == 0:
        raise MediaError(f"audio file is empty: {path}")
    return np.clip(pcm, -1.0, 1.0)


def save_png(path: str | Path, rgb: np.ndarray) -> None:
    """(H, W, 3) uint8 -> a PNG file."""
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = rgb.shape[1], rgb.shape[0], "rgb24"
    packets = codec.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24"))
    Path(path).write_bytes(b"".join(bytes(p) for p in packets + codec.encode(None)))
