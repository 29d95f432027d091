"""How far back agent speech may start: over silence fed in the engine's lookahead.

A frame's heard mouth waits for ``back`` samples of audio past its end (the engine's
``lookahead_samples``), so the feed clock always has that much fed beyond the frames made. Agent
speech that comes after silence may go back over that silence, where no frame was made yet, when
the queue fills all that is fed again: its first frame then need not wait for lookahead audio to
arrive, since the speech to come is already here. The engine hears what is fed again once more,
so the feed goes back only over at least half of ``back``, and not again before as much silence
has been fed anew; nothing goes back over speech, microphone audio or what an interrupt muted.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.voice.speech import SpeechQueue


@dataclass
class SpeechRewind:
    back: int = 0  # samples before the end of what was fed that the engine takes fed again
    sealed: int = 0  # nothing before this timeline sample is fed again

    def start(self, fed: int, n: int, speech: SpeechQueue) -> int:
        """Where a tick that feeds ``n`` more samples after ``fed`` starts its speech: back over the
        silence, or at ``fed``."""
        start = max(self.sealed, fed - self.back)
        if fed - start < self.back // 2 or not speech.fills(fed + n - start):
            return fed
        return start

    def fed(self, start: int, speech: int, end: int, rewound: bool) -> None:
        """A block ``[start, end)`` was fed with ``speech`` samples of speech first; once gone back,
        not again before as much silence is fed anew."""
        if speech:
            self.sealed = max(self.sealed, start + speech)
        if rewound:
            self.sealed = end

    def seal(self, at: int) -> None:
        """Nothing before ``at`` is fed again (the microphone's audio, an interrupt's muted speech)."""
        self.sealed = max(self.sealed, at)
