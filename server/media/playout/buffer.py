"""Playout jitter buffer: paces bursty engine frames out as one video and one audio stream.

The engine publishes frames a chunk at a time; the browser needs one video frame every 1/fps
and one audio packet every few ms, with audio for media time t heard while the video for t is
shown. This package does that pacing against per-frame deadlines and nothing else (no aiortc),
so it can be tested on a :class:`~server.media.clock.FakeClock`.

Timeline. ``t0`` is the clock time at which the session's first frame arrived. Output slots lie
on fixed grids anchored at ``t0``: video slot j is due at ``t0 + j/fps``, audio packet slot i at
``t0 + i*packet``. The playout delay L (:mod:`.delay`) maps an output instant ``t0 + w`` to
playout media time ``w - L``, so playout frame slot n plays at ``t0 + L + n/fps`` and packet k
at ``t0 + L + k*packet``, both from the same t0 and L, so they cannot drift apart: a raise of L
inserts held video and silence on both, a decrease skips the same media span on both. Where
each engine frame sits on the playout timeline is the resync epochs' business (:mod:`.epochs`);
the frames wait in a :class:`~.frame_queue.FrameQueue`; :mod:`.av_offset` measures A/V at release.

Consumers may be late (a loaded event loop): within a tolerance they get the slots they missed
back to back, each at or after its deadline; beyond it they skip to the slot holding the
current time. Nothing is ever released before its deadline.
"""

from __future__ import annotations

import logging
import math
from fractions import Fraction

import numpy as np

from server.base.engine_port import PublishedFrame
from server.media.clock import Clock, MonotonicClock
from server.media.playout.av_offset import AvOffsetMeter
from server.media.playout.config import EPS, PlayoutConfig
from server.media.playout.cursors import Arrivals, AudioCursor, PlayoutCounts, VideoCursor
from server.media.playout.delay import DelayController
from server.media.playout.epochs import EpochTimeline
from server.media.playout.frame_queue import FrameQueue, Held
from server.media.playout.outputs import AudioOut, PlayoutStats, VideoOut
from server.media.playout.waits import Waits

log = logging.getLogger(__name__)


class PlayoutBuffer:
    """Jitter buffer between one session's engine and its two outgoing tracks.

    Producer: :meth:`put` / :meth:`put_nowait`. Consumers: one task calling :meth:`next_video`,
    one calling :meth:`next_audio`; each returns at (never before) its slot's deadline. The video
    consumer drives the adaptation of L (it sees the underruns). A consumer that is late by at most
    its tolerance gets each missed slot in turn, at once; one that falls further behind (or starts
    after t0 + L) resumes at the slot holding the current time, dropping what it missed. Not
    thread-safe: call everything from the session's event loop.
    """

    def __init__(self, config: PlayoutConfig | None = None, clock: Clock | None = None) -> None:
        self.config = cfg = config or PlayoutConfig()
        self._clock: Clock = clock or MonotonicClock()
        self._delay = DelayController(cfg)
        self._epochs = EpochTimeline(cfg)
        self._frames = FrameQueue(cfg.fps, cfg.sample_rate)
        self._av = AvOffsetMeter(cfg.fps, cfg.audio_late_tolerance_s)
        self._t0: float | None = None
        self._arrivals = Arrivals()
        self._video = VideoCursor()
        self._audio = AudioCursor()
        self._released_w: Fraction = Fraction(-1)  # latest output instant either track released
        self._counts = PlayoutCounts()

        self._waits = Waits()

    # ---------------------------------------------------------------- producer

    async def put(self, frame: PublishedFrame) -> None:
        """Hand a frame over, waiting while the buffer is full (back-pressure on the engine)."""
        while not self.put_nowait(frame):
            await self._waits.for_space()

    def put_nowait(self, frame: PublishedFrame) -> bool:
        """Take a frame unless the buffer is full (then False, nothing changed).

        A frame that is already too late is taken and dropped at once (counted), since waiting
        for room would only make it later. If the engine's newest frames keep coming late while
        L is already at its maximum (or one is later than the maximum delay), the media timeline
        is re-based so that this frame is due L from now (a resync) and it is kept.
        """
        self._waits.check()
        cfg = self.config
        if frame.fps != cfg.fps or frame.sample_rate != cfg.sample_rate:
            raise ValueError(
                f"frame is {frame.fps} fps / {frame.sample_rate} Hz, playout {cfg.fps} / {cfg.sample_rate}"
            )
        now = self._clock.now()
        if self._t0 is None:
            self._start(frame, now)
        assert self._t0 is not None
        now_rel = now - self._t0
        slot = self._epochs.slot_of(frame)
        if slot in self._frames:
            raise ValueError(f"frame {frame.index} is already buffered")
        self._evict()
        newest = frame.index > self._arrivals.top
        if self._is_late(frame, slot, now_rel):
            self._arrivals.late_run += 1
            if not (newest and self._should_resync(slot, now_rel)):
                self._arrivals.top = max(self._arrivals.top, frame.index)
                self._counts.frames_in += 1
                if slot >= self._epochs.current.start:
                    self._delay.arrived_late(slot, now_rel, self._released_w)
                self._drop(now_rel)
                return True
            self._resync(frame, now_rel)
            slot = self._epochs.slot_of(frame)
        else:
            self._arrivals.late_run = 0
        if len(self._frames) >= cfg.capacity_frames:
            return False
        self._arrivals.top = max(self._arrivals.top, frame.index)
        self._counts.frames_in += 1
        self._frames.add(slot, frame, self._epochs.sample_of(frame))
        self._delay.arrived(slot, now_rel)
        return True

    # ---------------------------------------------------------------- consumers

    async def next_video(self) -> VideoOut:
        """Sleep until the next video slot's deadline and return what to show in it."""
        t0 = await self._wait_started()
        period = self.config.frame_period
        slot = self._video.next
        if slot is None:
            slot = 0 if self.config.preview else self._delay.delay_q(Fraction(0)) * self.config.frames_per_quantum
        await self._sleep_until(t0 + float(slot * period))
        lagged = self._clock.now() - self._due(slot * period) > self.config.video_tolerance + EPS
        if lagged:
            ahead = max(slot, self._slot_now(period))
            self._counts.video_skipped += ahead - slot
            slot = ahead
        self._video.next = slot + 1
        out = self._video_slot(slot, lagged)
        shown = None if out.inserted or out.frame_index is None else out.frame_index / self.config.fps
        self._av.video_released(out.slot, shown, self._clock.now())
        self._evict()
        return out

    async def next_audio(self) -> AudioOut:
        """Sleep until the next audio packet's deadline and return its PCM."""
        self._audio.started = True
        t0 = await self._wait_started()
        period = self.config.packet_period
        index = self._audio.next
        if index is None:  # with a preview, silence until the first frame's own packets
            index = 0 if self.config.preview else self._delay.delay_q(Fraction(0)) * self.config.packets_per_quantum
        await self._sleep_until(t0 + float(index * period))
        if self._clock.now() - self._due(index * period) > self.config.audio_late_tolerance_s + EPS:
            ahead = max(index, self._slot_now(period))
            self._counts.audio_skipped += ahead - index
            index = ahead
        self._audio.next = index + 1
        out = self._audio_packet(index)
        self._evict()
        return out

    def close(self) -> None:
        """End the session: wake every waiter; later calls raise :class:`PlayoutClosed`."""
        if self._waits.closed:
            return
        self._frames.clear()
        self._waits.close()

    @property
    def closed(self) -> bool:
        return self._waits.closed

    @property
    def t0(self) -> float | None:
        """Clock time the first frame arrived (None before)."""
        return self._t0

    def frame_origin(self) -> float | None:
        """Clock time at which engine frame 0 would play now (frame n at ``origin + n / fps``):
        the deadline the engine schedules against. None before the first frame arrived."""
        if self._t0 is None:
            return None
        now_rel = self._clock.now() - self._t0
        offset = (self._epochs.current.shift - self._epochs.n0) * self.config.frame_period
        return self._t0 + self._delay.delay_s(now_rel) + float(offset)

    def stats(self) -> PlayoutStats:
        c = self._counts
        misses = c.repeats + c.drops
        now_rel = 0.0 if self._t0 is None else self._clock.now() - self._t0
        return PlayoutStats(
            frames_in=c.frames_in,
            frames_shown=c.shown,
            repeats=c.repeats,
            drops=c.drops,
            skips=c.skips,
            holds=c.holds,
            deadline_misses=misses,
            miss_ratio=misses / max(1, c.shown + misses),
            delay=self._delay.delay_s(now_rel),
            target_delay=self._delay.target,
            depth=len(self._frames),
            audio_packets=c.packets,
            silent_packets=c.silent,
            av_offset=self._av.offset,
            audio_skipped=c.audio_skipped,
            video_skipped=c.video_skipped,
            resyncs=c.resyncs,
        )

    # ---------------------------------------------------------------- slots

    def _video_slot(self, slot: int, lagged: bool) -> VideoOut:
        w = slot * self.config.frame_period
        self._released_w = max(self._released_w, w)
        media = slot - self._delay.delay_q(w) * self.config.frames_per_quantum
        due = self._due(w)
        if media < 0 and self._video.passed < 0:  # a preview slot: the first frame, before its own slot
            first = self._frames.get(0)
            if first is not None:
                return self._video_out(slot, due, repeated=True, inserted=True, frame=first.frame)
        if media <= self._video.passed:
            self._counts.holds += 1
            return self._video_out(slot, due, repeated=True, inserted=True)
        passed = self._frames.discard_between(self._video.passed, media)
        if lagged:
            for _ in range(passed):
                self._drop(float(w))
        else:
            self._counts.skips += passed
        self._video.passed = media
        epoch = self._epochs.at_slot(media)
        if epoch is None:  # the hold a resync inserted
            self._counts.holds += 1
            return self._video_out(slot, due, repeated=True, inserted=True)
        self._video.media = self._epochs.n0 + media - epoch.shift
        held = self._frames.get(media)
        if held is None:
            self._counts.repeats += 1
            self._delay.underrun(w, self._released_w)
            return self._video_out(slot, due, repeated=True, inserted=False)
        self._counts.shown += 1
        self._video.last_frame = held.frame
        self._delay.shown(w, self._released_w, quiet=self._quiet(held.frame))
        return self._video_out(slot, due, repeated=False, inserted=False)

    def _quiet(self, frame: PublishedFrame) -> bool:
        """The frame's audio is silence (or there is none)."""
        audio = frame.audio
        return audio is None or not audio.size or float(np.abs(audio).max()) < self.config.quiet_level

    def _video_out(self, slot: int, due: float, repeated: bool, inserted: bool,
                   frame: PublishedFrame | None = None) -> VideoOut:
        last = self._video.last_frame if frame is None else frame
        assert self._video.blank is not None
        return VideoOut(
            slot=slot,
            media_slot=self._video.media,
            pts=Fraction(self._video.media, self.config.fps),
            rgb=self._video.blank if last is None else last.rgb,
            frame_index=None if last is None else last.index,
            repeated=repeated,
            inserted=inserted,
            due=due,
        )

    def _audio_packet(self, index: int) -> AudioOut:
        w = index * self.config.packet_period
        self._released_w = max(self._released_w, w)
        packet = index - self._delay.delay_q(w) * self.config.packets_per_quantum
        n = self.config.packet_samples
        self._counts.packets += 1
        if packet <= self._audio.passed:
            self._counts.silent += 1
            return self._audio_out(index, w, None, None, np.zeros(n, np.int16))
        self._audio.passed = packet
        start = packet * n
        epoch = self._epochs.at_samples(start, start + n)
        if epoch is None:  # inside the hold a resync inserted
            self._counts.silent += 1
            return self._audio_out(index, w, None, None, np.zeros(n, np.int16))
        media_sample = self._epochs.s0 + start - epoch.shift_samples
        pcm, heard = self._frames.gather(start, n)
        if not heard:
            self._counts.silent += 1
        out = self._audio_out(index, w, packet - epoch.shift_samples // n, media_sample, pcm)
        if heard:
            media = media_sample / self.config.sample_rate
            slot = math.floor(w / self.config.frame_period)
            self._av.audio_released(slot, media, self._clock.now(), self._video.next)
        return out

    def _audio_out(
        self, index: int, w: Fraction, packet: int | None, start: int | None, pcm: np.ndarray
    ) -> AudioOut:
        return AudioOut(
            index=index,
            pts=index * self.config.packet_samples,
            packet=packet,
            media_sample=start,
            pcm=pcm,
            sample_rate=self.config.sample_rate,
            inserted=packet is None,
            due=self._due(w),
        )

    # ---------------------------------------------------------------- resync

    def _should_resync(self, slot: int, now_rel: float) -> bool:
        """The engine's newest frame is late and raising L cannot help any more."""
        cfg = self.config
        lateness = now_rel - self._delay.delay_s(now_rel) - float(slot * self.config.frame_period)
        if lateness > cfg.max_delay + EPS:
            return True
        return self._arrivals.late_run >= cfg.resync_after_late and self._delay.at_max

    def _resync(self, frame: PublishedFrame, now_rel: float) -> None:
        """Re-base the timeline: ``frame`` (and the engine's later frames) move to slots due L from now.

        The slots between what the tracks passed (or hold buffered) and the new position are an
        inserted hold: still video and silence, counted as holds, not misses.
        """
        cfg = self.config
        delay = self._delay.delay_s(now_rel)
        late_by = now_rel - delay - float(self._epochs.slot_of(frame) * self.config.frame_period)
        audio_passed = -((self._audio.passed + 1) * self.config.packet_samples * cfg.fps // -cfg.sample_rate)
        start = max(self._video.passed + 1, audio_passed, self._frames.last_slot + 1)
        epoch = self._epochs.rebase(frame, start, now_rel)
        self._counts.resyncs += 1
        self._arrivals.late_run = 0
        self._delay.forget_arrivals()
        log.warning(
            "playout resync: frame %d was %.2f s late; it now plays in %.2f s (%d frames of hold)",
            frame.index,
            late_by,
            float(epoch.start * self.config.frame_period) + delay - now_rel,
            epoch.start - epoch.gap_start,
        )

    # ---------------------------------------------------------------- bookkeeping

    def _start(self, frame: PublishedFrame, now: float) -> None:
        self._t0 = now
        self._epochs.begin(frame)
        self._video.media = frame.index
        self._video.blank = np.zeros_like(frame.rgb)
        self._waits.started()

    def _is_late(self, frame: PublishedFrame, slot: int, now_rel: float) -> bool:
        """Its video slot (or the audio packet holding its first sample) has already been played."""
        if slot < self._epochs.current.start or slot <= self._video.passed:
            return True
        if self._epochs.sample_of(frame) < (self._audio.passed + 1) * self.config.packet_samples:
            return True
        return now_rel - self._delay.delay_s(now_rel) > float(slot * self.config.frame_period) + EPS

    def _drop(self, now_rel: float) -> None:
        self._counts.drops += 1
        self._delay.missed(now_rel)

    def _evict(self) -> None:
        """Forget frames neither track can still play; an unshown one counts as dropped.

        A track that is late (within its tolerance) may still come for a frame after its
        deadline, so frames are kept until the tolerance past it has gone by too.
        """
        if self._t0 is None:
            return
        now_rel = self._clock.now() - self._t0
        media_now = now_rel - self._delay.delay_s(now_rel)
        rate = self.config.sample_rate
        heard_to = (self._audio.passed + 1) * self.config.packet_samples
        audio_tol = self.config.audio_late_tolerance_s if self._audio.started else 0.0

        passed, period, video_tol = self._video.passed, self.config.frame_period, self.config.video_tolerance

        def needed(slot: int, held: Held) -> bool:
            video = slot > passed and media_now <= float(slot * period) + video_tol + EPS
            return video or (held.end > heard_to and media_now < held.end / rate + audio_tol - EPS)

        for slot in self._frames.evict(needed):
            if slot > self._video.passed:
                self._drop(now_rel)
        if len(self._frames) < self.config.capacity_frames:
            self._waits.space_freed()

    def _due(self, w: Fraction) -> float:
        assert self._t0 is not None
        return self._t0 + float(w)

    def _slot_now(self, period: Fraction) -> int:
        """The slot whose interval holds the current time: a consumer too late resumes there."""
        assert self._t0 is not None
        now = self._clock.now()
        slot = max(0, math.floor((now - self._t0) / float(period)))
        while self._due((slot + 1) * period) <= now:
            slot += 1
        while slot > 0 and self._due(slot * period) > now:
            slot -= 1
        return slot

    async def _wait_started(self) -> float:
        while self._t0 is None and not self._waits.closed:
            await self._waits.for_start()
        self._waits.check()
        assert self._t0 is not None
        return self._t0

    async def _sleep_until(self, t: float) -> None:
        await self._waits.sleep_until(self._clock, t)
