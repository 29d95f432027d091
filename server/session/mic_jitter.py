"""How much microphone audio waits for the feed clock in mirror mode: the microphone's jitter buffer.

Microphone audio arrives in 20 ms packets whose spacing the network disturbs; the feed clock
takes it a fixed holdback after wall time. A packet later than that leaves its due samples
missing: the clock feeds silence in their place (the timeline never waits) and the packet's
audio, when it comes, queues behind. So every underrun lengthens the wait by what was missing:
a bad network grows the buffer by itself. ``MicJitter`` counts those underruns and brings the
wait back down once the network is steady again: after a steady spell, the audio the buffer
never needed (a low percentile of its slack over the spell's last seconds, less a packet's margin:
one late burst does not hold it up) is dropped a packet at a time, each where it is quiet, so no
word is cut. The slack after a take is the audio left waiting plus how long the newest packet has
already waited: a packet that came just after the last tick could have come that much later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class MicJitter:
    """Underruns and steady spells of the microphone buffer; ``now`` is the feed clock's time."""

    margin_s: float = 0.02  # left waiting after a trim: one packet
    steady_s: float = 5.0  # no underrun for this long before the buffer is trimmed
    spare_percentile: float = 10.0  # of the audio left waiting after each take, over a spell: what it never needed
    underruns: int = field(default=0, init=False)
    trimmed_s: float = field(default=0.0, init=False)  # audio dropped by trims, in all
    _since: float | None = field(default=None, init=False)  # start of the current steady spell
    # (time, slack) after each take, the latest ``steady_s`` of this spell: what it needed earlier in a
    # long spell (before trims it since made, or just after a late burst) does not hold it up
    _levels: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=1000), init=False)

    def underrun(self, now: float) -> None:
        """Due microphone samples were not in yet: a new spell starts."""
        self.underruns += 1
        self._restart(now)

    def excess(self, now: float, waiting_s: float) -> float:
        """After a take, the buffer's slack was ``waiting_s``: the seconds of audio that may be
        dropped now (0 until a spell has been steady for ``steady_s``; a spell with nothing to
        spare starts the next)."""
        if self._since is None:
            self._since = now
        self._levels.append((now, waiting_s))
        while self._levels[0][0] < now - self.steady_s:
            self._levels.popleft()
        if now - self._since < self.steady_s:
            return 0.0
        spare = float(np.percentile([level for _, level in self._levels], self.spare_percentile)) - self.margin_s
        if spare < 1e-6:  # nothing (or rounding) to spare: the next spell
            self._restart(now)
            return 0.0
        return spare

    def trimmed(self, seconds: float) -> None:
        """``seconds`` of the excess were dropped: the spell's levels are that much lower."""
        self.trimmed_s += seconds
        self._levels = deque(((t, level - seconds) for t, level in self._levels), maxlen=self._levels.maxlen)

    def _restart(self, now: float) -> None:
        self._since = now
        self._levels.clear()
