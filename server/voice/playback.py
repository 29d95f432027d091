"""Which frames belong to which utterance, and the events due when those frames play out.

The feed clock knows the timeline sample where each utterance starts and ends; frame ``i``
covers samples ``[i*spf, (i+1)*spf)``. ``playback.started``/``finished`` fire when the
playout releases (not when the engine generates) the first/last such frame. Comparisons
are ``>=`` so that a dropped boundary frame still closes its utterance; its ``pts`` is then
the utterance's own last frame, not the later one that closed it (playout that catches up
after a stall skips frames, and the events still bracket exactly the utterance).

An interrupt ends every utterance at once, at the media sample where the voice is cut
(the next audio packet to be played): those already playing finish there, interrupted;
those fed to the engine but not yet heard finish unplayed (``pts: null``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from server.base.protocol import PlaybackFinished, PlaybackStarted


@dataclass
class _Span:
    utterance_id: str
    first_sample: int
    first_frame: int
    fed_until: int  # timeline sample just after the utterance's last sample fed so far
    last_frame: int | None = None
    interrupted: bool = False
    started_pts: float | None = None


class PlaybackTracker:
    def __init__(self, sample_rate: int, fps: int) -> None:
        self._spf = Fraction(sample_rate, fps)
        self._fps = fps
        self._sample_rate = sample_rate
        self._spans: list[_Span] = []

    def _frame_of(self, sample: int) -> int:
        return int(sample // self._spf)

    @property
    def active(self) -> int:
        return len(self._spans)

    @property
    def playing(self) -> bool:
        """Some utterance's first frame has been played and its last has not."""
        return any(span.started_pts is not None for span in self._spans)

    def begin(self, utterance_id: str, first_sample: int) -> None:
        self._spans.append(_Span(utterance_id, first_sample, self._frame_of(first_sample), first_sample))

    def fed(self, utterance_id: str, end_sample: int) -> None:
        """More of the utterance reached the engine, up to (not including) ``end_sample``."""
        span = self._open(utterance_id)
        if span is not None:
            span.fed_until = max(span.fed_until, end_sample)

    def end(self, utterance_id: str, end_sample: int | None = None, interrupted: bool = False) -> None:
        """The utterance's last fed sample is ``end_sample - 1`` (default: the last one reported fed)."""
        span = self._open(utterance_id)
        if span is not None:
            end = span.fed_until if end_sample is None else end_sample
            span.last_frame = max(span.first_frame, self._frame_of(max(end, span.first_sample + 1) - 1))
            span.interrupted = interrupted

    def cut(self, utterance_id: str, fed_samples: int) -> None:
        """Interrupted after ``fed_samples`` of it reached the engine: it ends where feeding stopped."""
        span = self._open(utterance_id)
        if span is not None:
            self.end(utterance_id, span.first_sample + max(1, fed_samples), interrupted=True)

    def rename(self, old: str, new: str) -> None:
        for span in self._spans:
            if span.utterance_id == old:
                span.utterance_id = new

    def interrupt(self, cut_sample: int) -> list[PlaybackStarted | PlaybackFinished]:
        """End everything at timeline sample ``cut_sample``, the first one the viewer will not hear."""
        events: list[PlaybackStarted | PlaybackFinished] = []
        for span in list(self._spans):
            if span.started_pts is not None or span.first_sample < cut_sample:
                if span.started_pts is None:  # its audio began just before the cut; its first frame is due now
                    start = round(span.first_sample / self._sample_rate, 4)
                    events.append(PlaybackStarted(utterance_id=span.utterance_id, pts=start))
                played = max(span.first_sample, min(cut_sample, span.fed_until))
                pts = round(played / self._sample_rate, 4)
                events.append(PlaybackFinished(utterance_id=span.utterance_id, pts=pts, interrupted=True))
            else:
                events.append(PlaybackFinished(utterance_id=span.utterance_id, pts=None, interrupted=True))
        self._spans.clear()
        return events

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
                last_pts = max(span.started_pts, span.last_frame / self._fps)
                events.append(
                    PlaybackFinished(utterance_id=span.utterance_id, pts=last_pts, interrupted=span.interrupted)
                )
                self._spans.remove(span)
        return events

    def _open(self, utterance_id: str) -> _Span | None:
        for span in self._spans:
            if span.utterance_id == utterance_id and span.last_frame is None:
                return span
        return None
