"""Agent speech waiting to be fed to the engine: a bounded FIFO of utterances.

The feed clock pulls exactly as many samples as real time allows; this queue hands them
out in order and says where each utterance starts and ends inside the pulled block, so the
session can map utterances to frame indices.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


class BacklogFull(Exception):
    """Queued speech would exceed the session's cap."""


@dataclass
class Utterance:
    id: str
    samples: np.ndarray  # float32 mono at the engine rate
    fed: int = 0

    @property
    def remaining(self) -> int:
        return self.samples.size - self.fed


@dataclass(frozen=True)
class Segment:
    """Part of one utterance inside a pulled block: ``[start, end)`` are block offsets."""

    utterance_id: str
    start: int
    end: int
    first: bool  # the utterance's first sample is in this block
    last: bool  # its last sample is in this block


class SpeechQueue:
    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self._items: deque[Utterance] = deque()

    @property
    def pending_samples(self) -> int:
        return sum(u.remaining for u in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def append(self, utterance: Utterance, extra_pending: int = 0) -> None:
        """Queue ``utterance``; ``extra_pending`` counts other speech held for this session."""
        if utterance.samples.size == 0:
            raise ValueError("empty utterance")
        if self.pending_samples + extra_pending + utterance.samples.size > self.max_samples:
            raise BacklogFull(f"speech backlog would exceed {self.max_samples} samples")
        self._items.append(utterance)

    def take(self, n: int) -> tuple[np.ndarray, list[Segment]]:
        """Up to ``n`` samples of queued speech (fewer when the queue runs dry)."""
        parts: list[np.ndarray] = []
        segments: list[Segment] = []
        pos = 0
        while pos < n and self._items:
            utt = self._items[0]
            k = min(n - pos, utt.remaining)
            parts.append(utt.samples[utt.fed : utt.fed + k])
            segments.append(
                Segment(utt.id, pos, pos + k, first=utt.fed == 0, last=utt.fed + k == utt.samples.size)
            )
            utt.fed += k
            pos += k
            if utt.remaining == 0:
                self._items.popleft()
        block = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return block, segments

    def clear(self) -> tuple[Utterance | None, list[Utterance]]:
        """Drop everything: (the utterance cut mid-way if any, those never started)."""
        items = list(self._items)
        self._items.clear()
        if items and items[0].fed > 0:
            return items[0], items[1:]
        return None, items
