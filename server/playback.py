"""Which frames belong to which utterance, and the events due when those frames play out.

The feed clock knows the timeline sample where each utterance starts and ends; frame ``i``
covers samples ``[i*spf, (i+1)*spf)``. ``playback.started``/``finished`` fire when the
playout releases (not when the engine generates) the first/last such frame. Comparisons
are ``>=`` so that a dropped boundary frame still closes its utterance.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from server.protocol import PlaybackFinished, PlaybackStarted


@dataclass
class _Span:
    utterance_id: str
    first_sample: int
    first_frame: int
    last_frame: int | None = None
    interrupted: bool = False
    started_pts: float | None = None


class PlaybackTracker:
    def __init__(self, sample_rate: int, fps: int) -> None:
        self._spf = Fraction(sample_rate, fps)
        self._fps = fps
        self._spans: list[_Span] = []

    def _frame_of(self, sample: int) -> int:
        return int(sample // self._spf)

    @property
    def active(self) -> int:
        return len(self._spans)

    def begin(self, utterance_id: str, first_sample: int) -> None:
        self._spans.append(_Span(utterance_id, first_sample, self._frame_of(first_sample)))

    def end(self, utterance_id: str, end_sample: int, interrupted: bool = False) -> None:
        """The utterance's last fed sample is ``end_sample - 1``."""
        for span in self._spans:
            if span.utterance_id == utterance_id and span.last_frame is None:
                span.last_frame = max(span.first_frame, self._frame_of(end_sample - 1))
                span.interrupted = interrupted
                return

    def cut(self, utterance_id: str, fed_samples: int) -> None:
        """Interrupted after ``fed_samples`` of it reached the engine: it ends where feeding stopped."""
        for span in self._spans:
            if span.utterance_id == utterance_id and span.last_frame is None:
                self.end(utterance_id, span.first_sample + max(1, fed_samples), interrupted=True)
                return

    def on_played(self, frame_index: int) -> list[PlaybackStarted | PlaybackFinished]:
        events: list[PlaybackStarted | PlaybackFinished] = []
        pts = frame_index / self._fps
        for span in list(self._spans):
            if span.started_pts is None and frame_index >= span.first_frame:
                span.started_pts = pts
                events.append(PlaybackStarted(utterance_id=span.utterance_id, pts=pts))
            if (
                span.started_pts is not None
                and span.last_frame is not None
                and frame_index >= span.last_frame
            ):
                events.append(
                    PlaybackFinished(utterance_id=span.utterance_id, pts=pts, interrupted=span.interrupted)
                )
                self._spans.remove(span)
        return events
