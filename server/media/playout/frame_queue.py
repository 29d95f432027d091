"""The frames playout holds, by playout slot, with the audio they carry."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from server.base.engine_port import PublishedFrame


@dataclass(frozen=True)
class Held:
    frame: PublishedFrame
    sample: int  # playout sample of the frame's first audio sample

    @property
    def end(self) -> int:
        """Playout sample just after the frame's audio."""
        return self.sample + len(self.frame.audio)


class FrameQueue:
    """Buffered frames, oldest slot first; audio is gathered from whichever frames cover a span."""

    def __init__(self, fps: int, sample_rate: int) -> None:
        self._fps = fps
        self._sample_rate = sample_rate
        self._frames: dict[int, Held] = {}
        self._order: list[int] = []  # heap of buffered slots (may hold stale ones)

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, slot: int) -> bool:
        return slot in self._frames

    def get(self, slot: int) -> Held | None:
        return self._frames.get(slot)

    def add(self, slot: int, frame: PublishedFrame, sample: int) -> None:
        self._frames[slot] = Held(frame, sample)
        heapq.heappush(self._order, slot)

    @property
    def last_slot(self) -> int:
        """The highest buffered slot (-1 when empty)."""
        return max(self._frames, default=-1)

    def discard_between(self, after: int, before: int) -> int:
        """Forget the frames of slots strictly between ``after`` and ``before``; returns how many."""
        slots = [s for s in self._frames if after < s < before]
        for slot in slots:
            del self._frames[slot]
        return len(slots)

    def evict(self, needed: Callable[[int, Held], bool]) -> list[int]:
        """Forget frames from the oldest on until one is still ``needed``; returns their slots."""
        gone = []
        while self._order:
            slot = self._order[0]
            held = self._frames.get(slot)
            if held is not None and needed(slot, held):
                break
            heapq.heappop(self._order)
            if held is not None:
                del self._frames[slot]
                gone.append(slot)
        return gone

    def gather(self, start: int, count: int) -> tuple[np.ndarray, bool]:
        """PCM16 for playout samples [start, start+count), and whether any frame covered them."""
        fps, rate = self._fps, self._sample_rate
        buf = np.zeros(count, np.float32)
        heard = False
        first = start * fps // rate - 1
        last = (start + count) * fps // rate + 1
        for slot in range(first, last + 1):
            held = self._frames.get(slot)
            if held is None:
                continue
            audio = held.frame.audio
            lo = max(start, held.sample)
            hi = min(start + count, held.end)
            if lo < hi:
                buf[lo - start : hi - start] = audio[lo - held.sample : hi - held.sample]
                heard = True
        return np.rint(np.clip(buf, -1.0, 1.0) * 32767.0).astype(np.int16), heard

    def clear(self) -> None:
        self._frames.clear()
        self._order.clear()
