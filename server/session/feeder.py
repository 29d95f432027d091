"""The always-on feed clock: how much audio the engine gets, and from where, at each tick.

The engine's timeline advances only as fast as audio is fed, so feeding in real time keeps
frames due at a steady rate. Each tick feeds the samples that wall time has made due: the
microphone in mirror mode, queued speech in agent mode, silence for whatever is missing.
If the engine falls behind by more than its backlog cap, due audio is skipped (the
timeline slips, memory stays bounded) rather than queued without limit. In agent mode the
cap is tighter: silence fed far ahead of the frames would only delay the next utterance
behind it, so speech waits in the intake and enters the engine just in time. In mirror mode the
microphone's buffer grows with its underruns and is trimmed back when steady (``MicJitter``).

Agent speech that comes after silence may start back over the silence fed in the engine's
lookahead (``SpeechRewind``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from server.base.protocol import Mode
from server.media.microphone import SampleFifo
from server.session.mic_jitter import MicJitter
from server.session.speech_rewind import SpeechRewind
from server.voice.speech import Segment, SpeechQueue

MIC_LIVE_S = 0.5  # a microphone that sent samples this recently is live: its missing samples are an underrun
QUIET = 0.01  # microphone audio whose peak stays below this (of full scale) may be trimmed
TICK_SLACK_S = 0.001  # a tick wakes this long after its grid instant


@dataclass
class FeedBlock:
    """Audio for timeline samples ``[start, start + len(samples))`` plus where speech sits in it."""

    start: int
    samples: np.ndarray
    segments: list[Segment] = field(default_factory=list)
    skipped: int = 0  # due samples not fed because the engine is too far behind


class Feeder:
    """Pure feed-clock logic; the session calls :meth:`tick` from its event-loop task."""

    def __init__(
        self,
        sample_rate: int,
        speech: SpeechQueue,
        mic: SampleFifo,
        holdback_s: float,
        max_backlog_samples: int,
        mode: Mode,
        agent_backlog_samples: int | None = None,
        rewrite_samples: int = 0,
    ) -> None:
        self.sample_rate = sample_rate
        self.speech = speech
        self.mic = mic
        self.holdback_s = holdback_s
        self.jitter = MicJitter()
        self._mic_heard_at: float | None = None  # when microphone samples last arrived
        self.max_backlog_samples = max_backlog_samples
        self.agent_backlog_samples = max_backlog_samples if agent_backlog_samples is None else agent_backlog_samples
        self.mode: Mode = mode
        self.rewind = SpeechRewind(rewrite_samples)
        self.fed = 0
        self.skipped = 0
        self._anchor_time: float | None = None
        self._anchor_fed = 0

    def prefill(self, n: int) -> FeedBlock:
        """Silence fed ahead of real time before the clock starts (so the first chunk can run at once)."""
        assert self._anchor_time is None, "prefill only before the clock starts"
        block = FeedBlock(self.fed, np.zeros(n, np.float32))
        self.fed += n
        return block

    def hear_mic(self, samples: np.ndarray, now: float) -> None:
        """Microphone samples arrived at ``now``: queued for the feed clock."""
        self.mic.push(samples)
        if samples.size:
            self._mic_heard_at = now

    def start(self, now: float) -> None:
        self._anchor_time = now
        self._anchor_fed = self.fed

    def next_tick(self, now: float, tick_s: float) -> float:
        """Seconds until the next tick on the clock's own grid (every ``tick_s`` from its start, a
        millisecond late so its samples are due): each tick feeds the same whole number of samples, so
        the ticks that complete a frame's audio come one frame apart, never drifting across the
        frames (a tick every ``tick_s`` after the last would, by its own lateness)."""
        if self._anchor_time is None:
            return tick_s
        start = self._anchor_time + self.holdback_s
        k = math.floor((now - start - TICK_SLACK_S) / tick_s + 1e-9) + 1  # on a grid instant: the next one
        return max(0.0, start + k * tick_s + TICK_SLACK_S - now)

    def due(self, now: float) -> int:
        if self._anchor_time is None:
            return 0
        elapsed = max(0.0, now - self._anchor_time - self.holdback_s)
        return max(0, self._anchor_fed + int(elapsed * self.sample_rate) - self.fed - self.skipped)

    def tick(self, now: float, generated_samples: int) -> FeedBlock:
        n = self.due(now)
        if n == 0:
            return FeedBlock(self.fed, np.zeros(0, np.float32))
        cap = self.agent_backlog_samples if self.mode == "agent" else self.max_backlog_samples
        if self.fed - generated_samples > cap:
            if self.mode == "mirror":
                self.mic.take(n)
            self.skipped += n
            return FeedBlock(self.fed, np.zeros(0, np.float32), skipped=n)
        if self.mode == "mirror":
            start, got, segments = self.fed, self._take_mic(now, n), []
            self.rewind.seal(self.fed + n)
        else:
            self.mic.take(len(self.mic))
            start = self.rewind.start(self.fed, n, self.speech)
            got, segments = self.speech.take(self.fed + n - start)
            self.rewind.fed(start, got.size, self.fed + n, rewound=start < self.fed)
        block = np.zeros(self.fed + n - start, np.float32)
        block[: got.size] = got
        out = FeedBlock(start, block, segments)
        self.fed += n
        return out

    def seal(self) -> None:
        """Nothing fed so far is fed again (an interrupt mutes it)."""
        self.rewind.seal(self.fed)

    def _take_mic(self, now: float, n: int) -> np.ndarray:
        """``n`` due microphone samples (fewer if they are not in yet); the buffer's jitter is learnt from it:
        its slack is the audio left waiting plus how long the newest packet has waited already (a packet
        that came just after the last tick has waited most of a tick: it could have come that much later)."""
        got = self.mic.take(n)
        live = self._mic_heard_at is not None and now - self._mic_heard_at < MIC_LIVE_S
        if got.size < n and live:
            self.jitter.underrun(now)
        elif live:
            assert self._mic_heard_at is not None
            slack = len(self.mic) / self.sample_rate + now - self._mic_heard_at
            excess = int(self.jitter.excess(now, slack) * self.sample_rate)
            # a packet at a time (20 ms of quiet is common in speech), and no more than is waiting
            step = min(excess, self.sample_rate // 50, len(self.mic))
            if step and self.mic.drop_quiet(step, QUIET):
                self.jitter.trimmed(step / self.sample_rate)
        return got
