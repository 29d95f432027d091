"""Frame slots: where a worker writes a session's published frames.

For a worker subprocess, one file in ``/dev/shm`` per session, created and unlinked by the web
process (so a dead worker leaves nothing behind), mapped by both sides; for a worker thread of
the web process, plain memory of this process that both sides hold (``in_memory``). Each slot
holds one frame's RGB and its audio; the worker writes only into slots the web process has
released, which makes the slot count the session's credit: the engine runs at most that many
frames ahead of playout, and frame arrays are never pickled.
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
    def __init__(self, path: Path | None, count: int, frame_size: tuple[int, int], audio_samples: int,
                 memory: mmap.mmap | bytearray) -> None:
        self.path = path  # None: in this process's memory only
        self.count = count
        self.height, self.width = frame_size
        self.audio_samples = audio_samples
        self._rgb_bytes = self.height * self.width * 3
        self.slot_bytes = self._rgb_bytes + 4 * audio_samples
        self._memory: mmap.mmap | bytearray | None = memory
        self._buf = np.frombuffer(memory, dtype=np.uint8)

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
    def in_memory(cls, count: int, frame_size: tuple[int, int], audio_samples: int) -> FrameSlots:
        """Slots for a worker on a thread of this process: the worker writes into the same memory
        (:meth:`share`), nothing goes through the file system."""
        return cls(None, count, frame_size, audio_samples, bytearray(cls.size(count, frame_size, audio_samples)))

    def share(self) -> FrameSlots:
        """Another handle on in-process slots, closed on its own as a second mapping would be."""
        if not isinstance(self._memory, bytearray):
            raise ValueError("only in-process slots are shared by handle; a slot file is attached by its path")
        return FrameSlots(None, self.count, (self.height, self.width), self.audio_samples, self._memory)

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
        memory, self._memory = self._memory, None
        if isinstance(memory, mmap.mmap):
            try:
                memory.close()
            except BufferError:  # a view still exported; the mapping goes with the last one
                pass

    def unlink(self) -> None:
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
