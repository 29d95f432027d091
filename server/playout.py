"""Playout jitter buffer: paces bursty engine frames out as one video and one audio stream.

The engine publishes frames a chunk at a time; the browser needs one video frame every 1/fps
and one audio packet every few ms, with audio for media time t heard while the video for t is
shown. This module does that pacing against per-frame deadlines and nothing else (no aiortc),
so it can be tested on a :class:`~server.clock.FakeClock`.

Timeline. ``t0`` is the clock time at which the session's first frame arrived. Output slots lie
on fixed grids anchored at ``t0``: video slot j is due at ``t0 + j/fps``, audio packet slot i at
``t0 + i*packet``. The playout delay L maps an output instant ``t0 + w`` to media time ``w - L``,
so media frame n plays at ``t0 + L + n/fps`` and media packet k at ``t0 + L + k*packet``, both
from the same t0 and L, so they cannot drift apart. L only takes whole multiples of the quantum
where both grids meet (40 ms at 25 fps and 20 ms packets), and a new L takes effect at such an
instant for both tracks at once: a raise inserts held video and silence on both, a decrease
skips the same media span on both.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from engine.frames import PublishedFrame
from server.clock import Clock, MonotonicClock

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
    steady_after_s: float = 5.0  # no miss for this long before L may shrink
    capacity_frames: int = 150

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


@dataclass(frozen=True)
class VideoOut:
    """What the video track shows for one output slot.

    ``slot`` counts output slots on the steady wall-clock grid (due at ``t0 + slot/fps``), so it
    suits RTP timestamps; ``media_slot``/``pts`` say which media time is on screen.
    """

    slot: int
    media_slot: int  # media frame slot this output plays (held one for an inserted slot)
    pts: Fraction  # media time of media_slot
    rgb: np.ndarray
    frame_index: int | None  # frame whose pixels these are; None while nothing has been shown
    repeated: bool  # not a fresh frame: the slot's frame was missing, or a hold inserted by a raise of L
    inserted: bool  # the hold was inserted by a raise of L (not a deadline miss)
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
    holds: int  # video slots inserted by raising L
    deadline_misses: int
    miss_ratio: float  # deadline_misses / (frames_shown + deadline_misses)
    delay: float  # L in effect now
    target_delay: float  # what the adaptation aims at; L is this rounded up to the quantum
    depth: int  # frames held in the buffer
    audio_packets: int
    silent_packets: int  # packets without any frame audio (missing frames or inserted silence)
    av_offset: float  # (due - media time) of the last audio packet minus that of the last video slot


class PlayoutBuffer:
    """Jitter buffer between one session's engine and its two outgoing tracks.

    Producer: :meth:`put` / :meth:`put_nowait`. Consumers: one task calling :meth:`next_video`,
    one calling :meth:`next_audio`; each returns at its slot's deadline. The video consumer
    drives the adaptation of L (it sees the underruns). A consumer that falls behind (or starts
    after t0 + L) resumes at the slot holding the current time, dropping what it missed, rather
    than bursting. Not thread-safe: call everything from the session's event loop.
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
        q = float(self._quantum)
        self._q_min = math.ceil(cfg.min_delay / q - _EPS)
        self._q_max = max(self._q_min, math.floor(cfg.max_delay / q + _EPS))
        self._target = cfg.initial_delay
        # (instant relative to t0, L in quanta from then on); instants are on the quantum grid.
        first = (Fraction(0), self._quanta(self._target))
        self._changes: deque[tuple[Fraction, int]] = deque([first], maxlen=16)

        self._t0: float | None = None
        self._n0 = 0  # first frame's index: media slot 0
        self._s0 = 0  # first frame's sample index: media sample 0
        self._blank: np.ndarray | None = None
        self._frames: dict[int, PublishedFrame] = {}
        self._order: list[int] = []  # heap of buffered indices (may hold stale ones)

        self._v_next: int | None = None
        self._v_wm = -1  # last media slot the video track has passed
        self._last_frame: PublishedFrame | None = None
        self._a_next: int | None = None
        self._a_wm = -1  # last media packet the audio track has passed
        self._offset_v: Fraction | None = None
        self._offset_a: Fraction | None = None

        self._last_miss = 0.0  # relative to t0
        self._last_decay = 0.0
        # Sliding-window minimum of (media time - arrival time) of recent frames: the evidence
        # that a shorter L would still have been in time.
        self._early: deque[tuple[float, float]] = deque()

        self._frames_in = self._shown = self._repeats = self._drops = self._skips = self._holds = 0
        self._packets = self._silent = 0

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
        for room would only make it later.
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
        if frame.index in self._frames:
            raise ValueError(f"frame {frame.index} is already buffered")
        self._evict()
        if self._is_late(frame, now):
            self._frames_in += 1
            self._drop(now - self._t0)
            return True
        if len(self._frames) >= cfg.capacity_frames:
            return False
        self._frames_in += 1
        self._frames[frame.index] = frame
        heapq.heappush(self._order, frame.index)
        self._note_arrival(frame, now - self._t0)
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
        lagged = self._clock.now() >= t0 + float((slot + 1) * period)
        if lagged:
            slot = self._slot_now(period)
        self._v_next = slot + 1
        out = self._video_slot(slot, lagged)
        self._evict()
        return out

    async def next_audio(self) -> AudioOut:
        """Sleep until the next audio packet's deadline and return its PCM."""
        t0 = await self._wait_started()
        period = self._packet_period
        index = self._a_next
        if index is None:
            index = self._delay_q(Fraction(0)) * self._packets_per_q
        await self._sleep_until(t0 + float(index * period))
        if self._clock.now() >= t0 + float((index + 1) * period):
            index = self._slot_now(period)
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
        av = 0.0
        if self._offset_a is not None and self._offset_v is not None:
            av = float(self._offset_a - self._offset_v)
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
            av_offset=av,
        )

    # ---------------------------------------------------------------- slots

    def _video_slot(self, slot: int, lagged: bool) -> VideoOut:
        w = slot * self._frame_period
        media = slot - self._delay_q(w) * self._frames_per_q
        due = self._due(w)
        if media <= self._v_wm:
            self._holds += 1
            return self._video_out(slot, self._v_wm, due, repeated=True, inserted=True)
        for index in [i for i in self._frames if self._v_wm < i - self._n0 < media]:
            del self._frames[index]
            if lagged:
                self._drop(float(w))
            else:
                self._skips += 1
        self._v_wm = media
        self._offset_v = w - media * self._frame_period
        frame = self._frames.get(self._n0 + media)
        if frame is None:
            self._repeats += 1
            self._on_underrun(w)
            return self._video_out(slot, media, due, repeated=True, inserted=False)
        self._shown += 1
        self._last_frame = frame
        self._decay(w)
        return self._video_out(slot, media, due, repeated=False, inserted=False)

    def _video_out(self, slot: int, media: int, due: float, repeated: bool, inserted: bool) -> VideoOut:
        last = self._last_frame
        assert self._blank is not None
        return VideoOut(
            slot=slot,
            media_slot=self._n0 + media,
            pts=Fraction(self._n0 + media, self.config.fps),
            rgb=self._blank if last is None else last.rgb,
            frame_index=None if last is None else last.index,
            repeated=repeated,
            inserted=inserted,
            due=due,
        )

    def _audio_packet(self, index: int) -> AudioOut:
        w = index * self._packet_period
        packet = index - self._delay_q(w) * self._packets_per_q
        n = self._packet_samples
        self._packets += 1
        if packet <= self._a_wm:
            self._silent += 1
            return self._audio_out(index, w, None, None, np.zeros(n, np.int16))
        self._a_wm = packet
        self._offset_a = w - packet * self._packet_period
        start = self._s0 + packet * n
        pcm, heard = self._gather(start, n)
        if not heard:
            self._silent += 1
        return self._audio_out(index, w, packet, start, pcm)

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
        """PCM for media samples [start, start+count) from whichever buffered frames cover them."""
        cfg = self.config
        buf = np.zeros(count, np.float32)
        heard = False
        first = start * cfg.fps // cfg.sample_rate - 1
        last = (start + count) * cfg.fps // cfg.sample_rate + 1
        for index in range(first, last + 1):
            frame = self._frames.get(index)
            if frame is None:
                continue
            lo = max(start, frame.sample_index)
            hi = min(start + count, frame.sample_index + len(frame.audio))
            if lo < hi:
                buf[lo - start : hi - start] = frame.audio[lo - frame.sample_index : hi - frame.sample_index]
                heard = True
        return np.rint(np.clip(buf, -1.0, 1.0) * 32767.0).astype(np.int16), heard

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
        """Let L follow the target from the next quantum instant after w, for both tracks alike."""
        q = self._quanta(self._target)
        if q == self._changes[-1][1]:
            return
        at = (math.floor(w / self._quantum) + 1) * self._quantum
        if self._changes[-1][0] == at:
            self._changes.pop()
        self._changes.append((at, q))

    def _on_underrun(self, w: Fraction) -> None:
        self._last_miss = float(w)
        self._target = min(self.config.max_delay, self._target + self.config.raise_step)
        self._schedule(w)

    def _decay(self, w: Fraction) -> None:
        """Shrink L slowly once production has been steady, and only while recent frames had room."""
        cfg = self.config
        now = float(w)
        since = max(self._last_decay, self._last_miss + cfg.steady_after_s)
        self._last_decay = now
        if now <= since or not self._has_room(now):
            return
        self._target = max(cfg.min_delay, self._target - cfg.decay_per_s * (now - since))
        self._schedule(w)

    def _has_room(self, now: float) -> bool:
        early = self._early
        while early and early[0][0] < now - self.config.steady_after_s:
            early.popleft()
        if not early:
            return False
        return early[0][1] + self._delay_s(now) >= float(self._quantum) - _EPS

    def _note_arrival(self, frame: PublishedFrame, now_rel: float) -> None:
        ahead = float((frame.index - self._n0) * self._frame_period) - now_rel
        while self._early and self._early[-1][1] >= ahead:
            self._early.pop()
        self._early.append((now_rel, ahead))

    # ---------------------------------------------------------------- bookkeeping

    def _start(self, frame: PublishedFrame, now: float) -> None:
        self._t0 = now
        self._n0 = frame.index
        self._s0 = frame.sample_index
        self._blank = np.zeros_like(frame.rgb)
        self._wake(self._start_waiters)

    def _is_late(self, frame: PublishedFrame, now: float) -> bool:
        """Its video slot (or the audio packet holding its first sample) has already been played."""
        assert self._t0 is not None
        media = frame.index - self._n0
        if media < 0 or media <= self._v_wm:
            return True
        if frame.sample_index - self._s0 < (self._a_wm + 1) * self._packet_samples:
            return True
        now_rel = now - self._t0
        return now_rel - self._delay_s(now_rel) > float(media * self._frame_period) + _EPS

    def _drop(self, now_rel: float) -> None:
        self._drops += 1
        self._last_miss = now_rel

    def _evict(self) -> None:
        """Forget frames neither track can still play; an unshown one counts as dropped."""
        if self._t0 is None:
            return
        now_rel = self._clock.now() - self._t0
        media_now = now_rel - self._delay_s(now_rel) + _EPS
        rate = self.config.sample_rate
        heard_to = (self._a_wm + 1) * self._packet_samples
        while self._order:
            index = self._order[0]
            frame = self._frames.get(index)
            if frame is None:
                heapq.heappop(self._order)
                continue
            media = index - self._n0
            video_needs = media > self._v_wm and media_now < float((media + 1) * self._frame_period)
            end = frame.sample_index - self._s0 + len(frame.audio)
            audio_needs = end > heard_to and media_now < end / rate
            if video_needs or audio_needs:
                break
            heapq.heappop(self._order)
            del self._frames[index]
            if media > self._v_wm:
                self._drop(now_rel)
        if len(self._frames) < self.config.capacity_frames:
            self._wake(self._space_waiters)

    def _due(self, w: Fraction) -> float:
        assert self._t0 is not None
        return self._t0 + float(w)

    def _slot_now(self, period: Fraction) -> int:
        """The slot whose interval holds the current time: a late consumer resumes there, never bursts."""
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
