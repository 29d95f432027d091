"""Agent speech waiting to be fed to the engine: a bounded FIFO of (possibly still growing) utterances.

The feed clock pulls exactly as many samples as real time allows; this queue hands them
out in order and says where each utterance starts and ends inside the pulled block, so the
session can map utterances to frame indices.

An utterance may be *open*: its audio is still arriving (a sentence-by-sentence TTS, or an
agent streaming ``audio.append``). The feed clock plays what has arrived and, when an open
utterance runs dry, feeds silence while keeping its place: a later utterance never jumps
ahead of an earlier one that is still arriving, and audio that arrives slower than real
time plays with gaps instead of being reordered. Holding audio here until the feed clock
takes it (rather than handing it to the engine early) is what keeps ``interrupt`` cheap:
nothing queued here has been turned into frames yet.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from server.media.audio import take_samples


class BacklogFull(Exception):
    """Queued speech would exceed the session's cap."""


class Utterance:
    """One utterance's audio (float32 mono, engine rate); ``closed`` once no more will arrive."""

    def __init__(self, id: str, samples: np.ndarray | None = None, closed: bool = True) -> None:
        self.id = id
        self.closed = closed
        self.appended = 0
        self.fed = 0
        self._chunks: deque[np.ndarray] = deque()
        if samples is not None:
            self.extend(samples)

    @property
    def remaining(self) -> int:
        """Arrived but not yet fed."""
        return self.appended - self.fed

    @property
    def drained(self) -> bool:
        return self.closed and self.remaining == 0

    def extend(self, samples: np.ndarray) -> None:
        if samples.size:
            self._chunks.append(np.asarray(samples, np.float32))
            self.appended += samples.size

    def read(self, n: int) -> np.ndarray:
        out = take_samples(self._chunks, n)
        self.fed += out.size
        return out


@dataclass(frozen=True)
class Segment:
    """Part of one utterance inside a pulled block: ``[start, end)`` are block offsets.

    A segment may be empty (``start == end``) when it only reports that an utterance whose
    audio had all been fed earlier has now been closed (``last``).
    """

    utterance_id: str
    start: int
    end: int
    first: bool  # the utterance's first sample is in this block
    last: bool  # the utterance ends in this block (its last sample, or its closing)


class TooManyUtterances(BacklogFull):
    """The session already holds as many queued utterances as it takes."""


class SpeechQueue:
    def __init__(self, max_samples: int, max_utterances: int) -> None:
        self.max_samples = max_samples
        self.max_utterances = max_utterances  # each costs the per-block walk over the queue: bounded
        self._items: deque[Utterance] = deque()

    @property
    def pending_samples(self) -> int:
        return sum(u.remaining for u in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(list(self._items))

    def append(self, utterance: Utterance, extra_pending: int = 0) -> None:
        """Queue a complete ``utterance``; ``extra_pending`` counts other speech held for this session."""
        if utterance.closed and utterance.appended == 0:
            raise ValueError("empty utterance")
        self._check(utterance.remaining + extra_pending)
        self._items.append(utterance)

    def open(self, utterance_id: str) -> Utterance:
        """Reserve a place for an utterance whose audio will arrive later (see :meth:`extend`);
        :class:`TooManyUtterances` when ``max_utterances`` are queued."""
        if len(self._items) >= self.max_utterances:
            raise TooManyUtterances(f"{self.max_utterances} utterances are already queued")
        utterance = Utterance(utterance_id, closed=False)
        self._items.append(utterance)
        return utterance

    def extend(self, utterance: Utterance, samples: np.ndarray) -> None:
        """Add arriving audio to an open utterance, within the backlog cap."""
        if utterance.closed:
            raise ValueError(f"utterance {utterance.id} is closed")
        self._check(samples.size)
        utterance.extend(samples)

    def close(self, utterance: Utterance) -> bool:
        """No more audio for ``utterance``; False (and it is removed) if it never got any."""
        utterance.closed = True
        if utterance.appended == 0:
            self.remove(utterance)
            return False
        return True

    def remove(self, utterance: Utterance) -> None:
        if utterance in self._items:
            self._items.remove(utterance)

    def fills(self, n: int) -> bool:
        """Whether :meth:`take` of ``n`` would give speech all through: ``n`` samples, or every
        utterance it reaches to its end (none of them still arriving and run dry)."""
        queued = 0
        for utt in self._items:
            queued += utt.remaining
            if queued >= n:
                return True
            if not utt.closed:
                return False
        return queued > 0

    def take(self, n: int) -> tuple[np.ndarray, list[Segment]]:
        """Up to ``n`` samples of queued speech (fewer when the queue, or an open head, runs dry)."""
        parts: list[np.ndarray] = []
        segments: list[Segment] = []
        pos = 0
        while self._items:
            utt = self._items[0]
            k = min(n - pos, utt.remaining)
            if k == 0 and not utt.drained:
                break
            first = utt.fed == 0 and k > 0
            if k:
                parts.append(utt.read(k))
            if k or utt.drained:
                segments.append(Segment(utt.id, pos, pos + k, first=first, last=utt.drained))
            pos += k
            if not utt.drained:
                break
            self._items.popleft()
        block = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return block, segments

    def clear(self) -> tuple[Utterance | None, list[Utterance]]:
        """Drop everything: (the utterance cut mid-way if any, those never started)."""
        items = list(self._items)
        self._items.clear()
        for utt in items:
            utt.closed = True
        if items and items[0].fed > 0:
            return items[0], items[1:]
        return None, items

    def _check(self, incoming: int) -> None:
        if self.pending_samples + incoming > self.max_samples:
            raise BacklogFull(f"speech backlog would exceed {self.max_samples} samples")
