"""Playout jitter buffer: paces bursty engine frames out as one video and one audio stream.

The engine publishes frames a chunk at a time; the browser needs one video frame every 1/fps
and one audio packet every few ms, with audio for media time t heard while the video for t is
shown. This module does that pacing against per-frame deadlines and nothing else (no aiortc),
so it can be tested on a :class:`~server.media.clock.FakeClock`.

Timeline. ``t0`` is the clock time at which the session's first frame arrived. Output slots lie
on fixed grids anchored at ``t0``: video slot j is due at ``t0 + j/fps``, audio packet slot i at
``t0 + i*packet``. The playout delay L maps an output instant ``t0 + w`` to playout media time
``w - L``, so playout frame slot n plays at ``t0 + L + n/fps`` and packet k at
``t0 + L + k*packet``, both from the same t0 and L, so they cannot drift apart. L only takes
whole multiples of the quantum where both grids meet (40 ms at 25 fps and 20 ms packets), and a
new L takes effect at such an instant for both tracks at once: a raise inserts held video and
silence on both, a decrease skips the same media span on both.

Engine frame ``index`` sits at playout slot ``index - n0 + shift`` (its audio ``shift`` frames
later too), where ``n0`` is the first frame's index and ``shift`` starts at 0. When the engine
falls so far behind that even the maximum delay cannot cover it, a *resync* raises ``shift`` (by
whole quanta) so that the arriving frame is due L after now; the slots in between become an
inserted hold on both tracks, like a raise of L.

Consumers may be late (a loaded event loop): within a tolerance they get the slots they missed
back to back, each at or after its deadline; beyond it they skip to the slot holding the
current time. Nothing is ever released before its deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from engine.frames import PublishedFrame
from server.media.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

# Tolerance when comparing float clock readings with exact (Fraction) grid instants.
_EPS = 1e-9


class PlayoutClosed(Exception):
    """The buffer was closed (session over): no more frames go in or come out."""


@dataclass(frozen=True)
class PlayoutConfig:
    """Pacing and adaptation knobs; delays in seconds."""

    fps: int = 25
    sample_rate: int = 16000
    audio_packet_ms: int = 20
    initial_delay: float = 0.25
    min_delay: float = 0.1
    max_delay: float = 1.5
    raise_step: float = 0.1  # added to L after an underrun
    decay_per_s: float = 0.02  # L shrinks this much per second of steady production
    steady_after_s: float = 5.0  # no miss for this long before L may shrink (doubles after each underrun)
    steady_max_s: float = 60.0  # the longest that proof of steadiness is ever asked to be
    capacity_frames: int = 150
    # A consumer this late still gets every slot (back to back); later than this it skips ahead.
    audio_late_tolerance_s: float = 0.2
    video_late_tolerance_s: float | None = None  # None: one frame period
    # Resync after this many late arrivals in a row while L is already at its maximum.
    resync_after_late: int = 5

    def __post_init__(self) -> None:
        if self.fps <= 0 or self.sample_rate <= 0 or self.audio_packet_ms <= 0:
            raise ValueError("fps, sample_rate and audio_packet_ms must be positive")
        if (self.sample_rate * self.audio_packet_ms) % 1000:
            raise ValueError("an audio packet must hold a whole number of samples")
        if not 0 <= self.min_delay <= self.initial_delay <= self.max_delay:
            raise ValueError("need 0 <= min_delay <= initial_delay <= max_delay")
        if float(self.quantum) > self.max_delay + _EPS:
            raise ValueError(f"max_delay is below this rate's {float(self.quantum):.3f}s delay quantum")
        if self.capacity_frames < 1:
            raise ValueError("capacity_frames must be at least 1")
        if self.raise_step < 0 or self.decay_per_s < 0 or self.steady_after_s < 0:
            raise ValueError("raise_step, decay_per_s and steady_after_s must not be negative")
        if self.audio_late_tolerance_s < 0 or (self.video_late_tolerance_s or 0) < 0:
            raise ValueError("late tolerances must not be negative")
        if self.resync_after_late < 1:
            raise ValueError("resync_after_late must be at least 1")

    @property
    def frame_period(self) -> Fraction:
        return Fraction(1, self.fps)

    @property
    def packet_period(self) -> Fraction:
        return Fraction(self.audio_packet_ms, 1000)

    @property
    def packet_samples(self) -> int:
        return self.sample_rate * self.audio_packet_ms // 1000

    @property
    def quantum(self) -> Fraction:
        """Smallest step of L that keeps both grids whole: lcm of frame and packet period."""
        f, p = self.frame_period, self.packet_period
        return Fraction(math.lcm(f.numerator, p.numerator), math.gcd(f.denominator, p.denominator))

    @property
    def video_tolerance(self) -> float:
        tol = self.video_late_tolerance_s
        return float(self.frame_period) if tol is None else tol


@dataclass(frozen=True)
class VideoOut:
    """What the video track shows for one output slot.

    ``slot`` counts output slots on the steady wall-clock grid (due at ``t0 + slot/fps``), so it
    suits RTP timestamps; ``media_slot``/``pts`` say which media time is on screen.
    """

    slot: int
    media_slot: int  # engine frame slot this output plays (the held one for an inserted slot)
    pts: Fraction  # media time of media_slot
    rgb: np.ndarray
    frame_index: int | None  # frame whose pixels these are; None while nothing has been shown
    repeated: bool  # not a fresh frame: the slot's frame was missing, or a hold inserted by a raise of L
    inserted: bool  # the hold was inserted by a raise of L or a resync (not a deadline miss)
    due: float


@dataclass(frozen=True)
class AudioOut:
    """One audio packet: int16 mono PCM at the configured rate.

    ``index``/``pts`` count output packets/samples on the steady grid (due at
    ``t0 + index*packet``); ``packet``/``media_sample`` say which media span is in it.
    """

    index: int
    pts: int  # index * packet_samples
    packet: int | None  # media packet counted from the first frame's audio; None for inserted silence
    media_sample: int | None  # first media sample (the engine's sample index); None for inserted silence
    pcm: np.ndarray  # (packet_samples,) int16
    sample_rate: int
    inserted: bool
    due: float


@dataclass(frozen=True)
class PlayoutStats:
    """Counters since the session started; ``deadline_misses = repeats + drops``."""

    frames_in: int
    frames_shown: int
    repeats: int  # video slots whose frame was missing at the deadline (last frame repeated)
    drops: int  # frames thrown away because their deadline had passed
    skips: int  # on-time frames skipped to shorten L
    holds: int  # video slots inserted by raising L or by a resync
    deadline_misses: int
    miss_ratio: float  # deadline_misses / (frames_shown + deadline_misses)
    delay: float  # L in effect now
    target_delay: float  # what the adaptation aims at; L is this rounded up to the quantum
    depth: int  # frames held in the buffer
    audio_packets: int
    silent_packets: int  # packets without any frame audio (missing frames or inserted silence)
    # Seconds by which audio for media time t is released after the video for t, measured on the
    # latest audio packet heard against the video slot on screen at its due time, from the
    # instants both were actually released (so a late consumer shows). 0.0 before any pair.
    av_offset: float
    audio_skipped: int = 0  # packets never released: the audio consumer was later than its tolerance
    video_skipped: int = 0  # video slots never released: the video consumer was later than its tolerance
    resyncs: int = 0  # times the media timeline was re-based because the engine fell too far behind


@dataclass(frozen=True)
class _Epoch:
    """From playout slot ``start`` on, engine frame n sits at slot ``n - n0 + shift``.

    Slots in ``[gap_start, start)`` belong to no frame: the hold a resync inserted.
    Samples likewise, in playout samples (``gap_sample``, ``start_sample``, ``shift_samples``).
    """

    gap_start: int
    start: int
    shift: int
    gap_sample: int
    start_sample: int
    shift_samples: int


@dataclass(frozen=True)
class _Held:
    frame: PublishedFrame
    sample: int  # playout sample of the frame's first audio sample


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
        self._frame_period = cfg.frame_period
        self._packet_period = cfg.packet_period
        self._packet_samples = cfg.packet_samples
        self._quantum = cfg.quantum
        self._frames_per_q = int(self._quantum / self._frame_period)
        self._packets_per_q = int(self._quantum / self._packet_period)
        self._video_tol = cfg.video_tolerance
        self._audio_tol = cfg.audio_late_tolerance_s
        q = float(self._quantum)
        self._q_min = math.ceil(cfg.min_delay / q - _EPS)
        self._q_max = max(self._q_min, math.floor(cfg.max_delay / q + _EPS))
        self._target = cfg.initial_delay
        # (instant relative to t0, L in quanta from then on); instants are on the quantum grid.
        first = (Fraction(0), self._quanta(self._target))
        self._changes: deque[tuple[Fraction, int]] = deque([first], maxlen=16)
        self._epochs: list[_Epoch] = [_Epoch(0, 0, 0, 0, 0, 0)]

        self._t0: float | None = None
        self._n0 = 0  # first frame's index
        self._s0 = 0  # first frame's sample index
        self._top = -1  # highest engine frame index received
        self._blank: np.ndarray | None = None
        self._frames: dict[int, _Held] = {}  # by playout slot
        self._order: list[int] = []  # heap of buffered playout slots (may hold stale ones)

        self._v_next: int | None = None
        self._v_wm = -1  # last playout slot the video track has passed
        self._v_media = 0  # engine index of the last media slot video passed (shown by holds)
        self._last_frame: PublishedFrame | None = None
        self._a_next: int | None = None
        self._a_wm = -1  # last playout packet the audio track has passed
        self._audio_started = False
        self._released_w: Fraction = Fraction(-1)  # latest output instant either track released

        # A/V offset at release: recent video releases (slot, release time, media time on screen)
        # and heard audio packets whose video slot has not been released yet.
        keep = max(8, math.ceil(self._audio_tol * cfg.fps) + 4)  # video slots audio may lag behind
        self._v_released: deque[tuple[int, float, float | None]] = deque(maxlen=keep)
        self._a_pending: deque[tuple[int, float, float]] = deque(maxlen=32)
        self._av_offset = 0.0

        self._last_miss = 0.0  # relative to t0
        # How long production must have had room before L shrinks: doubled by each underrun, so
        # L stops probing its way back down into the same underrun every few seconds.
        self._steady_s = cfg.steady_after_s
        self._last_decay = 0.0
        self._late_run = 0  # late arrivals in a row
        # Sliding-window minimum of (media time - arrival time) of recent frames: the evidence
        # that a shorter L would still have been in time.
        self._early: deque[tuple[float, float]] = deque()

        self._frames_in = self._shown = self._repeats = self._drops = self._skips = self._holds = 0
        self._packets = self._silent = 0
        self._audio_skipped = self._video_skipped = self._resyncs = 0

        self._closed = False
        self._closed_fut: asyncio.Future[None] | None = None
        self._start_waiters: list[asyncio.Future[None]] = []
        self._space_waiters: list[asyncio.Future[None]] = []

    # ---------------------------------------------------------------- producer

    async def put(self, frame: PublishedFrame) -> None:
        """Hand a frame over, waiting while the buffer is full (back-pressure on the engine)."""
        while not self.put_nowait(frame):
            fut = asyncio.get_running_loop().create_future()
            self._space_waiters.append(fut)
            await fut

    def put_nowait(self, frame: PublishedFrame) -> bool:
        """Take a frame unless the buffer is full (then False, nothing changed).

        A frame that is already too late is taken and dropped at once (counted), since waiting
        for room would only make it later. If the engine's newest frames keep coming late while
        L is already at its maximum (or one is later than the maximum delay), the media timeline
        is re-based so that this frame is due L from now (a resync) and it is kept.
        """
        if self._closed:
            raise PlayoutClosed("playout buffer is closed")
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
        slot = self._slot_of(frame)
        if slot in self._frames:
            raise ValueError(f"frame {frame.index} is already buffered")
        self._evict()
        newest = frame.index > self._top
        if self._is_late(frame, slot, now_rel):
            self._late_run += 1
            if not (newest and self._should_resync(slot, now_rel)):
                self._top = max(self._top, frame.index)
                self._frames_in += 1
                self._drop(now_rel)
                return True
            self._resync(frame, now_rel)
            slot = self._slot_of(frame)
        else:
            self._late_run = 0
        if len(self._frames) >= cfg.capacity_frames:
            return False
        self._top = max(self._top, frame.index)
        self._frames_in += 1
        self._frames[slot] = _Held(frame, self._sample_of(frame))
        heapq.heappush(self._order, slot)
        self._note_arrival(slot, now_rel)
        return True

    # ---------------------------------------------------------------- consumers

    async def next_video(self) -> VideoOut:
        """Sleep until the next video slot's deadline and return what to show in it."""
        t0 = await self._wait_started()
        period = self._frame_period
        slot = self._v_next
        if slot is None:
            slot = self._delay_q(Fraction(0)) * self._frames_per_q
        await self._sleep_until(t0 + float(slot * period))
        lagged = self._clock.now() - self._due(slot * period) > self._video_tol + _EPS
        if lagged:
            ahead = max(slot, self._slot_now(period))
            self._video_skipped += ahead - slot
            slot = ahead
        self._v_next = slot + 1
        out = self._video_slot(slot, lagged)
        self._note_video_release(out)
        self._evict()
        return out

    async def next_audio(self) -> AudioOut:
        """Sleep until the next audio packet's deadline and return its PCM."""
        self._audio_started = True
        t0 = await self._wait_started()
        period = self._packet_period
        index = self._a_next
        if index is None:
            index = self._delay_q(Fraction(0)) * self._packets_per_q
        await self._sleep_until(t0 + float(index * period))
        if self._clock.now() - self._due(index * period) > self._audio_tol + _EPS:
            ahead = max(index, self._slot_now(period))
            self._audio_skipped += ahead - index
            index = ahead
        self._a_next = index + 1
        out = self._audio_packet(index)
        self._evict()
        return out

    def close(self) -> None:
        """End the session: wake every waiter; later calls raise :class:`PlayoutClosed`."""
        if self._closed:
            return
        self._closed = True
        self._frames.clear()
        self._order.clear()
        if self._closed_fut is not None and not self._closed_fut.done():
            self._closed_fut.set_result(None)
        self._wake(self._start_waiters)
        self._wake(self._space_waiters)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def t0(self) -> float | None:
        """Clock time the first frame arrived (None before)."""
        return self._t0

    def stats(self) -> PlayoutStats:
        misses = self._repeats + self._drops
        now_rel = 0.0 if self._t0 is None else self._clock.now() - self._t0
        return PlayoutStats(
            frames_in=self._frames_in,
            frames_shown=self._shown,
            repeats=self._repeats,
            drops=self._drops,
            skips=self._skips,
            holds=self._holds,
            deadline_misses=misses,
            miss_ratio=misses / max(1, self._shown + misses),
            delay=self._delay_s(now_rel),
            target_delay=self._target,
            depth=len(self._frames),
            audio_packets=self._packets,
            silent_packets=self._silent,
            av_offset=self._av_offset,
            audio_skipped=self._audio_skipped,
            video_skipped=self._video_skipped,
            resyncs=self._resyncs,
        )

    # ---------------------------------------------------------------- slots

    def _video_slot(self, slot: int, lagged: bool) -> VideoOut:
        w = slot * self._frame_period
        self._released_w = max(self._released_w, w)
        media = slot - self._delay_q(w) * self._frames_per_q
        due = self._due(w)
        if media <= self._v_wm:
            self._holds += 1
            return self._video_out(slot, due, repeated=True, inserted=True)
        for s in [s for s in self._frames if self._v_wm < s < media]:
            del self._frames[s]
            if lagged:
                self._drop(float(w))
            else:
                self._skips += 1
        self._v_wm = media
        epoch = self._epoch_at(media)
        if epoch is None:  # the hold a resync inserted
            self._holds += 1
            return self._video_out(slot, due, repeated=True, inserted=True)
        self._v_media = self._n0 + media - epoch.shift
        held = self._frames.get(media)
        if held is None:
            self._repeats += 1
            self._on_underrun(w)
            return self._video_out(slot, due, repeated=True, inserted=False)
        self._shown += 1
        self._last_frame = held.frame
        self._decay(w)
        return self._video_out(slot, due, repeated=False, inserted=False)

    def _video_out(self, slot: int, due: float, repeated: bool, inserted: bool) -> VideoOut:
        last = self._last_frame
        assert self._blank is not None
        return VideoOut(
            slot=slot,
            media_slot=self._v_media,
            pts=Fraction(self._v_media, self.config.fps),
            rgb=self._blank if last is None else last.rgb,
            frame_index=None if last is None else last.index,
            repeated=repeated,
            inserted=inserted,
            due=due,
        )

    def _audio_packet(self, index: int) -> AudioOut:
        w = index * self._packet_period
        self._released_w = max(self._released_w, w)
        packet = index - self._delay_q(w) * self._packets_per_q
        n = self._packet_samples
        self._packets += 1
        if packet <= self._a_wm:
            self._silent += 1
            return self._audio_out(index, w, None, None, np.zeros(n, np.int16))
        self._a_wm = packet
        start = packet * n
        epoch = self._epoch_at_sample(start, start + n)
        if epoch is None:  # inside the hold a resync inserted
            self._silent += 1
            return self._audio_out(index, w, None, None, np.zeros(n, np.int16))
        media_sample = self._s0 + start - epoch.shift_samples
        pcm, heard = self._gather(start, n)
        if not heard:
            self._silent += 1
        out = self._audio_out(index, w, packet - epoch.shift_samples // n, media_sample, pcm)
        if heard:
            self._note_audio_release(w, media_sample / self.config.sample_rate)
        return out

    def _audio_out(
        self, index: int, w: Fraction, packet: int | None, start: int | None, pcm: np.ndarray
    ) -> AudioOut:
        return AudioOut(
            index=index,
            pts=index * self._packet_samples,
            packet=packet,
            media_sample=start,
            pcm=pcm,
            sample_rate=self.config.sample_rate,
            inserted=packet is None,
            due=self._due(w),
        )

    def _gather(self, start: int, count: int) -> tuple[np.ndarray, bool]:
        """PCM for playout samples [start, start+count) from whichever buffered frames cover them."""
        cfg = self.config
        buf = np.zeros(count, np.float32)
        heard = False
        first = start * cfg.fps // cfg.sample_rate - 1
        last = (start + count) * cfg.fps // cfg.sample_rate + 1
        for slot in range(first, last + 1):
            held = self._frames.get(slot)
            if held is None:
                continue
            audio = held.frame.audio
            lo = max(start, held.sample)
            hi = min(start + count, held.sample + len(audio))
            if lo < hi:
                buf[lo - start : hi - start] = audio[lo - held.sample : hi - held.sample]
                heard = True
        return np.rint(np.clip(buf, -1.0, 1.0) * 32767.0).astype(np.int16), heard

    # ---------------------------------------------------------------- A/V offset at release

    def _note_video_release(self, out: VideoOut) -> None:
        """Remember what video put on screen for this slot, and pair audio waiting for it."""
        shown = None
        if not out.inserted and out.frame_index is not None:
            shown = out.frame_index / self.config.fps
        released = self._clock.now()
        self._v_released.append((out.slot, released, shown))
        pending = self._a_pending
        while pending and pending[0][0] <= out.slot:
            slot, released_a, media_a = pending.popleft()
            if slot == out.slot and shown is not None:
                self._av_offset = (released_a - media_a) - (released - shown)

    def _note_audio_release(self, w: Fraction, media: float) -> None:
        """Pair this heard packet with the video slot on screen at its due time (now or once released)."""
        slot = math.floor(w / self._frame_period)
        released = self._clock.now()
        for v_slot, released_v, shown in reversed(self._v_released):
            if v_slot == slot:
                if shown is not None:
                    self._av_offset = (released - media) - (released_v - shown)
                return
            if v_slot < slot:
                break
        if self._v_next is None or slot >= self._v_next:
            self._a_pending.append((slot, released, media))

    # ---------------------------------------------------------------- adaptation of L

    def _quanta(self, delay: float) -> int:
        return min(self._q_max, max(self._q_min, math.ceil(delay / float(self._quantum) - _EPS)))

    def _delay_q(self, w: Fraction | float) -> int:
        """L (in quanta) in effect at instant w (relative to t0)."""
        for start, q in reversed(self._changes):
            if float(start) <= float(w) + _EPS:
                return q
        return self._changes[0][1]

    def _delay_s(self, w: Fraction | float) -> float:
        return float(self._delay_q(w) * self._quantum)

    def _schedule(self, w: Fraction) -> None:
        """Let L follow the target from the next quantum instant after w, for both tracks alike.

        The instant also lies after everything either track has released already (a consumer
        may be ahead of the other by its late tolerance), so both switch at the same instant.
        """
        q = self._quanta(self._target)
        if q == self._changes[-1][1]:
            return
        at = (math.floor(max(w, self._released_w) / self._quantum) + 1) * self._quantum
        if self._changes[-1][0] == at:
            self._changes.pop()
        self._changes.append((at, q))

    def _on_underrun(self, w: Fraction) -> None:
        self._last_miss = float(w)
        self._steady_s = min(max(self.config.steady_max_s, self.config.steady_after_s), 2 * self._steady_s)
        self._target = min(self.config.max_delay, self._target + self.config.raise_step)
        self._schedule(w)

    def _decay(self, w: Fraction) -> None:
        """Shrink L slowly once production has been steady, and only while recent frames had room."""
        cfg = self.config
        now = float(w)
        since = max(self._last_decay, self._last_miss + self._steady_s)
        self._last_decay = now
        if now <= since or not self._has_room(now):
            return
        self._target = max(cfg.min_delay, self._target - cfg.decay_per_s * (now - since))
        self._schedule(w)

    def _has_room(self, now: float) -> bool:
        early = self._early
        while early and early[0][0] < now - self._steady_s:
            early.popleft()
        if not early:
            return False
        return early[0][1] + self._delay_s(now) >= float(self._quantum) - _EPS

    def _note_arrival(self, slot: int, now_rel: float) -> None:
        ahead = float(slot * self._frame_period) - now_rel
        while self._early and self._early[-1][1] >= ahead:
            self._early.pop()
        self._early.append((now_rel, ahead))

    # ---------------------------------------------------------------- resync

    def _should_resync(self, slot: int, now_rel: float) -> bool:
        """The engine's newest frame is late and raising L cannot help any more."""
        cfg = self.config
        lateness = now_rel - self._delay_s(now_rel) - float(slot * self._frame_period)
        if lateness > cfg.max_delay + _EPS:
            return True
        return self._late_run >= cfg.resync_after_late and self._quanta(self._target) >= self._q_max

    def _resync(self, frame: PublishedFrame, now_rel: float) -> None:
        """Re-base the timeline: ``frame`` (and the engine's later frames) move to slots due L from now.

        Both tracks shift by the same whole number of quanta, so each frame's audio stays with it.
        The slots between what the tracks passed (or hold buffered) and the new position are an
        inserted hold: still video and silence, counted as holds, not misses.
        """
        cfg = self.config
        fpq = self._frames_per_q
        late_by = now_rel - self._delay_s(now_rel) - float(self._slot_of(frame) * self._frame_period)
        audio_passed = -((self._a_wm + 1) * self._packet_samples * cfg.fps // -cfg.sample_rate)
        lo = max(self._v_wm + 1, audio_passed, max(self._frames, default=-1) + 1, self._epochs[-1].start)
        gap_start = -(lo // -fpq) * fpq
        # Slot i is due at t0 + i/fps + L: i >= now*fps puts it at least L from now.
        target = max(gap_start, math.ceil(now_rel * cfg.fps - _EPS))
        shift = -((target - (frame.index - self._n0)) // -fpq) * fpq
        shift = max(shift, self._epochs[-1].shift)
        start = frame.index - self._n0 + shift
        shift_samples = shift * cfg.sample_rate // cfg.fps  # exact: whole quanta hold whole packets
        epoch = _Epoch(
            gap_start=gap_start,
            start=start,
            shift=shift,
            gap_sample=gap_start * cfg.sample_rate // cfg.fps,
            start_sample=frame.sample_index - self._s0 + shift_samples,
            shift_samples=shift_samples,
        )
        self._epochs.append(epoch)
        self._resyncs += 1
        self._late_run = 0
        self._early.clear()
        log.warning(
            "playout resync: frame %d was %.2f s late; it now plays in %.2f s (%d frames of hold)",
            frame.index,
            late_by,
            float(start * self._frame_period) + self._delay_s(now_rel) - now_rel,
            start - gap_start,
        )

    def _epoch_at(self, slot: int) -> _Epoch | None:
        """The epoch a playout slot belongs to; None inside a resync's hold."""
        for epoch in reversed(self._epochs):
            if slot >= epoch.start:
                return epoch
            if slot >= epoch.gap_start:
                return None
        return self._epochs[0]

    def _epoch_at_sample(self, start: int, end: int) -> _Epoch | None:
        """The epoch of the playout samples [start, end); None if they all lie in a resync's hold."""
        for i in range(len(self._epochs) - 1, -1, -1):
            epoch = self._epochs[i]
            if start >= epoch.start_sample:
                return epoch
            if start >= epoch.gap_sample:
                return epoch if end > epoch.start_sample else None
        return self._epochs[0]

    def _slot_of(self, frame: PublishedFrame) -> int:
        return frame.index - self._n0 + self._epochs[-1].shift

    def _sample_of(self, frame: PublishedFrame) -> int:
        return frame.sample_index - self._s0 + self._epochs[-1].shift_samples

    # ---------------------------------------------------------------- bookkeeping

    def _start(self, frame: PublishedFrame, now: float) -> None:
        self._t0 = now
        self._n0 = frame.index
        self._s0 = frame.sample_index
        self._v_media = frame.index
        self._blank = np.zeros_like(frame.rgb)
        self._wake(self._start_waiters)

    def _is_late(self, frame: PublishedFrame, slot: int, now_rel: float) -> bool:
        """Its video slot (or the audio packet holding its first sample) has already been played."""
        if slot < self._epochs[-1].start or slot <= self._v_wm:
            return True
        if self._sample_of(frame) < (self._a_wm + 1) * self._packet_samples:
            return True
        return now_rel - self._delay_s(now_rel) > float(slot * self._frame_period) + _EPS

    def _drop(self, now_rel: float) -> None:
        self._drops += 1
        self._last_miss = now_rel

    def _evict(self) -> None:
        """Forget frames neither track can still play; an unshown one counts as dropped.

        A track that is late (within its tolerance) may still come for a frame after its
        deadline, so frames are kept until the tolerance past it has gone by too.
        """
        if self._t0 is None:
            return
        now_rel = self._clock.now() - self._t0
        media_now = now_rel - self._delay_s(now_rel)
        rate = self.config.sample_rate
        heard_to = (self._a_wm + 1) * self._packet_samples
        audio_tol = self._audio_tol if self._audio_started else 0.0
        while self._order:
            slot = self._order[0]
            held = self._frames.get(slot)
            if held is None:
                heapq.heappop(self._order)
                continue
            video_needs = slot > self._v_wm and media_now <= float(slot * self._frame_period) + self._video_tol + _EPS
            end = held.sample + len(held.frame.audio)
            audio_needs = end > heard_to and media_now < end / rate + audio_tol - _EPS
            if video_needs or audio_needs:
                break
            heapq.heappop(self._order)
            del self._frames[slot]
            if slot > self._v_wm:
                self._drop(now_rel)
        if len(self._frames) < self.config.capacity_frames:
            self._wake(self._space_waiters)

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
        while self._t0 is None and not self._closed:
            fut = asyncio.get_running_loop().create_future()
            self._start_waiters.append(fut)
            await fut
        if self._closed:
            raise PlayoutClosed("playout buffer is closed")
        assert self._t0 is not None
        return self._t0

    async def _sleep_until(self, t: float) -> None:
        if self._clock.now() < t:
            if self._closed_fut is None:
                self._closed_fut = asyncio.get_running_loop().create_future()
            sleeper = asyncio.ensure_future(self._clock.sleep_until(t))
            try:
                await asyncio.wait({sleeper, self._closed_fut}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not sleeper.done():
                    sleeper.cancel()
        if self._closed:
            raise PlayoutClosed("playout buffer is closed")

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()
