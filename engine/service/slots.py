"""Shared-memory frame slots: where a worker writes a session's published frames.

One file in ``/dev/shm`` per session, created and unlinked by the web process (so a dead
worker leaves nothing behind), mapped by both sides. Each slot holds one frame's RGB and
its audio; the worker writes only into slots the web process has released, which makes the
slot count the session's credit: the engine runs at most that many frames ahead of
playout, and frame arrays are never pickled.
"""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
PREFIX = "avatar-frames-"


class FrameSlots:
    def __init__(self, path: Path, count: int, frame_size: tuple[int, int], audio_samples: int,
                 mapping: mmap.mmap) -> None:
        self.path = path
        self.count = count
        self.height, self.width = frame_size
        self.audio_samples = audio_samples
        self._rgb_bytes = self.height * self.width * 3
        self.slot_bytes = self._rgb_bytes + 4 * audio_samples
        self._map = mapping
        self._buf = np.frombuffer(mapping, dtype=np.uint8)

    @staticmethod
    def size(count: int, frame_size: tuple[int, int], audio_samples: int) -> int:
        return count * (frame_size[0] * frame_size[1] * 3 + 4 * audio_samples)

    @classmethod
    def create(cls, count: int, frame_size: tuple[int, int], audio_samples: int) -> FrameSlots:
        path = SHM_DIR / f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        size = cls.size(count, frame_size, audio_samples)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, count, frame_size, audio_samples, mapping)

    @classmethod
    def attach(cls, path: str | Path, count: int, frame_size: tuple[int, int], audio_samples: int) -> FrameSlots:
        size = cls.size(count, frame_size, audio_samples)
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != size:
                raise ValueError(f"{path} is not a slot file of {count} slots of this frame size")
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(Path(path), count, frame_size, audio_samples, mapping)

    def _views(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= slot < self.count:
            raise IndexError(f"slot {slot} out of range 0..{self.count - 1}")
        base = slot * self.slot_bytes
        rgb = self._buf[base:base + self._rgb_bytes].reshape(self.height, self.width, 3)
        audio = self._buf[base + self._rgb_bytes:base + self.slot_bytes].view(np.float32)
        return rgb, audio

    def write(self, slot: int, rgb: np.ndarray, audio: np.ndarray) -> None:
        dst_rgb, dst_audio = self._views(slot)
        dst_rgb[...] = rgb
        dst_audio[...] = audio

    def read(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the slot's frame and audio (the slot may be reused once released)."""
        rgb, audio = self._views(slot)
        return rgb.copy(), audio.copy()

    def close(self) -> None:
        self._buf = np.zeros(0, np.uint8)
        try:
            self._map.close()
        except BufferError:  # a view still exported; the mapping goes with the last one
            pass

    def unlink(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
