"""Playout jitter buffer on a fake clock: which frame goes out in which slot, at what time."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from engine.frames import PublishedFrame
from server.media.clock import FakeClock
from server.media.playout import AudioOut, PlayoutBuffer, PlayoutClosed, PlayoutConfig, VideoOut

FPS = 25
SR = 16000
SPF = SR // FPS  # samples per frame
PKT = SR * 20 // 1000  # samples per audio packet
T0 = 100.0


def ramp(start: int, stop: int) -> np.ndarray:
    """The int16 value each media sample carries in these tests: its own index (mod 30000)."""
    return (np.arange(start, stop) % 30000).astype(np.int16)


def frame(index: int) -> PublishedFrame:
    start = index * SR // FPS
    audio = ramp(start, (index + 1) * SR // FPS).astype(np.float32) / 32767.0
    rgb = np.full((2, 3, 3), index % 256, np.uint8)
    return PublishedFrame(index=index, fps=FPS, rgb=rgb, audio=audio, sample_rate=SR, chunk="N0")


def due(buf: PlayoutBuffer, seconds: Fraction | float) -> float:
    """Clock time of an instant given relative to t0, computed the way the buffer does."""
    assert buf.t0 is not None
    return buf.t0 + float(seconds)


Work = Callable[[int], float]


class Session:
    """A buffer on a fake clock with both tracks consumed into lists of (release time, output).

    ``video_work``/``audio_work`` give the seconds a consumer spends after its n-th output before
    it asks for the next one (an encoder on a loaded machine); ``offsets`` records
    ``stats().av_offset`` right after each release.
    """

    def __init__(
        self,
        config: PlayoutConfig | None = None,
        audio: bool = True,
        video_work: Work | None = None,
        audio_work: Work | None = None,
    ) -> None:
        self.clock = FakeClock(T0)
        self.buf = PlayoutBuffer(config or PlayoutConfig(), self.clock)
        self.video: list[tuple[float, VideoOut]] = []
        self.audio: list[tuple[float, AudioOut]] = []
        self.offsets: list[tuple[str, float, float]] = []  # (track, release time, av_offset)
        self.tasks = [asyncio.create_task(self._consume(self.buf.next_video, self.video, "video", video_work))]
        if audio:
            self.tasks.append(asyncio.create_task(self._consume(self.buf.next_audio, self.audio, "audio", audio_work)))

    async def _consume(self, pull, sink: list, kind: str, work: Work | None) -> None:
        while True:
            try:
                out = await pull()
            except PlayoutClosed:
                return
            now = self.clock.now()
            sink.append((now, out))
            self.offsets.append((kind, now, self.buf.stats().av_offset))
            if work is not None and (busy := work(len(sink) - 1)) > 0:
                await self.clock.sleep_until(now + busy)

    async def stop(self) -> None:
        self.buf.close()
        await self.clock.run_for(0)
        for task in self.tasks:
            if not task.done():  # busy in its work sleep, which close() does not interrupt
                task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def shown(self) -> list[int]:
        return [out.frame_index for _, out in self.video if not out.repeated]


def check_av(s: Session, video_late: float = 0.0, audio_late: float = 0.0) -> None:
    """Audio carries exactly the samples of the frames video showed, due at the same instants.

    Each output is released at its due time, or up to ``*_late`` after it, never before.
    """
    t0 = s.buf.t0
    assert t0 is not None
    when_shown = {out.frame_index: out.due for _, out in s.video if not out.repeated}
    for released, out in s.video:
        assert out.due - 1e-9 <= released <= out.due + video_late + 1e-9
        assert out.due == pytest.approx(t0 + out.slot / FPS, abs=1e-9)
    slots = [out.slot for _, out in s.video]
    assert slots == list(range(slots[0], slots[0] + len(slots))), "one video frame per slot, no gaps"
    indices = [out.index for _, out in s.audio]
    assert indices == list(range(indices[0], indices[0] + len(indices))), "one packet per 20 ms, no gaps"
    last_video_due = s.video[-1][1].due
    for released, out in s.audio:
        assert out.due - 1e-9 <= released <= out.due + audio_late + 1e-9
        assert out.due == pytest.approx(t0 + out.index * 0.02, abs=1e-9)
        assert out.pcm.dtype == np.int16 and out.pcm.shape == (PKT,)
        assert out.pts == out.index * PKT
        if out.inserted:
            assert not out.pcm.any()
            continue
        if out.due > last_video_due + 1e-9:
            continue  # the video track has not got this far yet
        # Heard exactly while its own frame is on screen: the frame owning these samples was
        # shown in the video slot holding this packet's due time, else the packet is silent.
        start = out.media_sample
        owner = start // SPF
        slot_due = out.due - (start - owner * SPF) / SR
        on_screen = owner in when_shown and abs(when_shown[owner] - slot_due) < 1e-6
        expected = ramp(start, start + PKT) if on_screen else np.zeros(PKT, np.int16)
        np.testing.assert_array_equal(out.pcm, expected, err_msg=f"packet {out.index}, media {start}")
    if not video_late and not audio_late:
        assert all(abs(off) < 1e-9 for _, _, off in s.offsets), "released on time and aligned: no offset"


async def test_fake_clock_wakes_sleepers_at_their_deadlines() -> None:
    clock = FakeClock(5.0)
    woke: list[float] = []

    async def sleeper(t: float) -> None:
        await clock.sleep_until(t)
        woke.append(clock.now())

    tasks = [asyncio.create_task(sleeper(t)) for t in (5.3, 5.1, 5.2)]
    await clock.run_for(0)
    assert clock.sleepers == 3
    clock.advance(0.05)
    await clock.run_for(0)
    assert woke == []
    await clock.run_until(5.25)
    assert woke == [5.1, 5.2]
    clock.advance(1.0)
    await asyncio.gather(*tasks)
    assert woke == [5.1, 5.2, 6.25]
    await clock.sleep_until(1.0)  # the past: returns at once


async def test_burst_of_twelve_is_released_one_per_slot_at_its_deadline() -> None:
    s = Session()
    for i in range(12):
        assert s.buf.put_nowait(frame(i))
    L = s.buf.stats().delay
    assert L == pytest.approx(0.28)  # initial 0.25 rounded up to whole 40 ms quanta
    await s.clock.run_until(T0 + L - 0.001)
    assert s.video == [] and s.audio == [], "start barrier: nothing before t0 + L"
    await s.clock.run_until(due(s.buf, Fraction(7, 25) + Fraction(11, 25)))
    assert s.shown() == list(range(12))
    times = [t for t, _ in s.video]
    assert times == pytest.approx([T0 + L + n / FPS for n in range(12)], abs=1e-9)
    assert [out.media_slot for _, out in s.video] == list(range(12))
    assert [out.pts for _, out in s.video] == [Fraction(n, FPS) for n in range(12)]
    assert s.audio[0][0] == pytest.approx(T0 + L)
    assert len(s.audio) == 23  # 12 frames = 24 packets, the last one is due 20 ms after slot 11
    st = s.buf.stats()
    assert (st.frames_in, st.frames_shown, st.deadline_misses, st.drops) == (12, 12, 0, 0)
    check_av(s)
    await s.stop()


async def test_missing_frame_repeats_the_last_one_and_raises_the_delay() -> None:
    s = Session()
    for i in range(5):
        s.buf.put_nowait(frame(i))
    L = s.buf.stats().delay
    await s.clock.run_until(due(s.buf, L + 5 / FPS))
    t, out = s.video[-1]
    assert (out.media_slot, out.frame_index, out.repeated, out.inserted) == (5, 4, True, False)
    assert t == pytest.approx(T0 + L + 5 / FPS)
    st = s.buf.stats()
    assert (st.repeats, st.deadline_misses) == (1, 1)
    # The raise (target 0.25 + 0.04, rounded up) starts at the next slot for both tracks.
    await s.clock.run_for(0.04)
    raised = s.buf.stats().delay
    assert raised == pytest.approx(0.32)
    for i in range(6, 10):
        assert s.buf.put_nowait(frame(i))
    await s.clock.run_until(due(s.buf, raised + Fraction(9, FPS)))
    holds = [out for _, out in s.video if out.inserted]
    assert len(holds) == 1 and all(o.frame_index == 4 and o.repeated for o in holds)
    assert s.shown() == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    released = {out.frame_index: t for t, out in s.video if not out.repeated}
    assert released[6] == pytest.approx(T0 + raised + 6 / FPS)
    assert released[9] == pytest.approx(T0 + raised + 9 / FPS)
    assert s.buf.stats().holds == 1
    check_av(s)
    await s.stop()


async def test_frame_arriving_after_its_deadline_is_dropped() -> None:
    s = Session()
    for i in range(3):
        s.buf.put_nowait(frame(i))
    L = s.buf.stats().delay
    await s.clock.run_until(due(s.buf, L + 3 / FPS + 0.01))
    assert s.buf.put_nowait(frame(3)) is True  # taken, but only to be dropped
    assert s.buf.put_nowait(frame(4))
    raised = s.buf.stats().target_delay
    await s.clock.run_until(due(s.buf, 0.32 + 4 / FPS))
    st = s.buf.stats()
    # The underrun raised the target a step (0.29); frame 3, 10 ms past its slot, needed 0.31 with
    # the jitter margin; L is that on the 40 ms grid.
    assert raised == pytest.approx(0.31) and st.delay == pytest.approx(0.32)
    assert (st.frames_in, st.drops, st.repeats, st.deadline_misses) == (5, 1, 1, 2)
    assert s.shown() == [0, 1, 2, 4]
    assert [out.frame_index for _, out in s.video if out.media_slot == 3 and not out.inserted] == [2]
    assert s.video[-1][0] == pytest.approx(T0 + 0.32 + 4 / FPS)
    check_av(s)
    await s.stop()


async def test_delay_rises_after_underruns_but_never_above_max() -> None:
    s = Session(PlayoutConfig(max_delay=1.0))
    s.buf.put_nowait(frame(0))
    delays = []
    for _ in range(100):
        await s.clock.run_for(0.04)
        delays.append(s.buf.stats().delay)
    assert delays == sorted(delays)
    assert delays[-1] == pytest.approx(1.0)
    assert max(delays) <= 1.0 + 1e-9
    times = [t for t, _ in s.video]
    assert np.diff(times) == pytest.approx(np.full(len(times) - 1, 0.04)), "steady cadence, no bursts"
    st = s.buf.stats()
    assert st.repeats > 0 and st.holds > 0 and st.frames_shown == 1
    assert all(out.frame_index == 0 for _, out in s.video)
    await s.stop()


async def test_delay_shrinks_slowly_while_steady_and_stops_at_min() -> None:
    cfg = PlayoutConfig(initial_delay=0.5, min_delay=0.2, decay_per_s=0.1, steady_after_s=1.0)
    s = Session(cfg)

    async def produce() -> None:
        for i in range(10_000):
            await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(0)
    seen: list[tuple[float, float]] = []
    for _ in range(250):
        await s.clock.run_for(0.04)
        seen.append((s.clock.now() - T0, s.buf.stats().delay))
    delays = [d for _, d in seen]
    assert delays[0] == pytest.approx(0.52)
    assert delays == sorted(delays, reverse=True), "no miss, so L never goes up"
    for t, d in seen:
        assert d >= 0.2 - 1e-9
        if t <= 1.0:
            assert d == pytest.approx(0.52)
        assert d >= 0.5 - 0.1 * max(0.0, t - 1.0) - 1e-9, "not faster than decay_per_s"
    assert delays[-1] == pytest.approx(0.2)
    st = s.buf.stats()
    assert st.deadline_misses == 0 and st.repeats == 0 and st.drops == 0
    assert st.skips == round((0.52 - 0.2) / 0.04)  # each 40 ms step skips one frame...
    shown = s.shown()
    assert sum(b - a - 1 for a, b in zip(shown, shown[1:], strict=False)) == st.skips
    check_av(s)  # ...and the same 40 ms of audio, so the tracks stay together
    producer.cancel()
    await s.stop()


async def test_delay_does_not_shrink_when_frames_arrive_just_in_time() -> None:
    cfg = PlayoutConfig(initial_delay=0.2, min_delay=0.04, decay_per_s=0.1, steady_after_s=0.5)
    s = Session(cfg)
    s.buf.put_nowait(frame(0))
    L = s.buf.stats().delay

    async def produce() -> None:
        for i in range(1, 200):
            await s.clock.sleep_until(due(s.buf, L + Fraction(i, FPS)) - 0.01)
            await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(5.0)
    st = s.buf.stats()
    assert st.deadline_misses == 0 and st.delay == pytest.approx(L)
    producer.cancel()
    await s.stop()


async def test_delay_settles_on_the_jitter_production_has() -> None:
    """Chunks of 4 frames each ready up to 90 ms after their nominal time (t0 is the first
    frame's arrival): L comes down from 0.5 s to just over the lateness seen, with no miss."""
    delay, misses = await delay_after(30.0, [0.0, 0.03, 0.09, 0.01, 0.06, 0.0, 0.08, 0.02],
                                      config=PlayoutConfig(initial_delay=0.5, capacity_frames=400))
    assert misses == 0
    margin = PlayoutConfig().jitter_margin
    assert 0.09 + margin - 1e-9 <= delay <= 0.09 + margin + 0.04 + 1e-9, delay


def quiet(f: PublishedFrame) -> PublishedFrame:
    return dataclasses.replace(f, audio=np.zeros_like(f.audio))


async def delay_after(seconds: float, lateness: list[float], make=frame,
                      config: PlayoutConfig | None = None) -> tuple[float, int]:
    """(L, deadline misses) after ``seconds`` of chunks of 4 frames, chunk c ready ``lateness[c %
    len]`` after its nominal time (t0 is the first frame's arrival); default knobs unless ``config``."""
    s = Session(config or PlayoutConfig(capacity_frames=400))
    for i in range(4):
        s.buf.put_nowait(make(i))

    async def produce() -> None:
        for c in range(1, 10_000):
            await s.clock.sleep_until(due(s.buf, Fraction(4 * c, FPS)) + lateness[c % len(lateness)])
            for i in range(4 * c, 4 * c + 4):
                await s.buf.put(make(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(seconds)
    st = s.buf.stats()
    producer.cancel()
    await s.stop()
    return st.delay, st.deadline_misses


async def test_steady_production_plays_out_within_80_ms() -> None:
    """Chunks each ready up to 30 ms late: L comes down from its initial 0.25 s to 80 ms (the
    lateness seen plus the jitter margin, on the 40 ms grid), missing nothing."""
    delay, misses = await delay_after(30.0, [0.0, 0.02, 0.03, 0.01, 0.0, 0.025])
    assert misses == 0
    assert delay == pytest.approx(0.08)


async def test_the_delay_shrinks_faster_through_silence() -> None:
    """Skipping silent frames is not heard: while the face is quiet L reaches what the jitter
    needs within a second of proving steady (3 s), while speech takes it down at 0.1 s a second."""
    jitter = [0.0, 0.01]
    speaking, _ = await delay_after(4.0, jitter)
    silent, misses = await delay_after(4.0, jitter, make=lambda i: quiet(frame(i)))
    assert misses == 0
    assert silent == pytest.approx(0.04), silent
    assert speaking >= 0.16 - 1e-9, speaking


async def test_preview_shows_the_first_frame_at_once_and_keeps_the_timeline() -> None:
    """With ``preview`` the video starts at t0 with the first frame, held (inserted, never a miss)
    until the timeline reaches it L later; audio and every later frame keep their due times."""
    cfg = PlayoutConfig(initial_delay=0.24, preview=True)
    s = Session(cfg)
    for i in range(50):
        s.buf.put_nowait(frame(i))
    await s.clock.run_for(1.0)
    L = s.buf.stats().delay
    t0 = s.buf.t0
    first_t, first = s.video[0]
    assert first_t == pytest.approx(t0) and first.slot == 0 and first.frame_index == 0
    assert np.array_equal(first.rgb, frame(0).rgb)
    previews = [out for _, out in s.video if out.slot < round(L * FPS)]
    assert len(previews) == round(L * FPS) and all(o.inserted and o.frame_index == 0 for o in previews)
    fresh = [(t, out) for t, out in s.video if not out.repeated]
    assert fresh[0][1].frame_index == 0 and fresh[0][0] == pytest.approx(t0 + L)
    assert s.audio[0][0] == pytest.approx(t0) and s.audio[0][1].inserted, "both tracks start at t0"
    voiced = [(t, out) for t, out in s.audio if not out.inserted]
    assert voiced[0][0] == pytest.approx(t0 + L) and voiced[0][1].media_sample == 0, "frame 0's voice in its slot"
    st = s.buf.stats()
    assert st.deadline_misses == 0
    check_av(s)
    await s.stop()


async def chunked_misses(cfg: PlayoutConfig, seconds: float = 240.0) -> tuple[int, int]:
    """Deadline misses of an engine making 16-frame chunks in real time on average, each ready
    0.45 s after its audio, but every fifteenth one (every 9.6 s) 0.75 s after: (misses in the first and in the
    second half of the run)."""
    s = Session(cfg)

    async def produce() -> None:
        start = s.clock.now()
        for c in range(int(seconds / 0.64)):
            await s.clock.sleep_until(start + c * 0.64 + (0.75 if c % 15 == 14 else 0.45))
            for i in range(16 * c, 16 * c + 16):
                await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(seconds / 2)
    half = s.buf.stats().deadline_misses
    await s.clock.run_for(seconds / 2)
    producer.cancel()
    total = s.buf.stats().deadline_misses
    await s.stop()
    return half, total - half


async def test_delay_stops_probing_back_into_the_same_underrun() -> None:
    """Each underrun doubles how long L remembers arrivals, so a slow chunk every 9.6 s costs a
    few misses once instead of one each time the window has forgotten the last."""
    cfg = PlayoutConfig(initial_delay=0.25, min_delay=0.1, steady_after_s=5.0, capacity_frames=400)
    first, second = await chunked_misses(cfg)
    assert first > 0, "the slow chunks do make L rise at first"
    assert second == 0, (first, second)
    without_backoff = await chunked_misses(dataclasses.replace(cfg, steady_max_s=cfg.steady_after_s))
    assert without_backoff[1] > 5, without_backoff  # probing down again and again keeps missing


def loaded_lateness(c: int) -> float:
    """A loaded machine's chunk c: ready 0-30 ms late, every 17th 60 ms more, and every 251st
    (one in 40 s) 200 ms more (another session's work or the encoders took the cores)."""
    return (c * 7 % 4) * 0.01 + (0.06 if c % 17 == 5 else 0.0) + (0.2 if c % 251 == 50 else 0.0)


async def loaded_delay(cfg: PlayoutConfig, seconds: float = 180.0) -> tuple[float, float]:
    """(mean L over the second half, share of deadlines missed) for chunks of 4 frames ready
    ``loaded_lateness`` after their nominal time."""
    s = Session(cfg)
    for i in range(4):
        s.buf.put_nowait(frame(i))

    async def produce() -> None:
        for c in range(1, 10_000):
            await s.clock.sleep_until(due(s.buf, Fraction(4 * c, FPS)) + loaded_lateness(c))
            for i in range(4 * c, 4 * c + 4):
                await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(seconds / 2)
    delays = []
    for _ in range(int(seconds / 2 / 0.2)):
        await s.clock.run_for(0.2)
        delays.append(s.buf.stats().delay)
    st = s.buf.stats()
    producer.cancel()
    await s.stop()
    return float(np.mean(delays)), st.miss_ratio


async def test_a_rare_slow_chunk_costs_a_frame_not_the_delay() -> None:
    """With a miss budget L leaves the worst frame or two of its window late instead of covering
    every rare slow chunk for the whole call: lower, and still well inside 0.5% misses."""
    cfg = PlayoutConfig(capacity_frames=400)
    budgeted, budgeted_misses = await loaded_delay(cfg)
    covering, covering_misses = await loaded_delay(dataclasses.replace(cfg, miss_budget=0.0))
    assert budgeted_misses <= 0.005, budgeted_misses
    assert budgeted <= covering - 0.03, (budgeted, covering)
    assert covering_misses <= budgeted_misses


async def test_audio_stays_with_video_under_bursty_and_stalled_production() -> None:
    s = Session()
    jitter = [0.0, 0.11, 0.02, 0.15, 0.0, 0.08, 0.9, 0.05, 0.0, 0.3, 0.01, 0.0, 0.12] * 4

    async def produce() -> None:
        start = s.clock.now()
        for c, late in enumerate(jitter):
            await s.clock.sleep_until(start + c * 0.16 + late)
            for i in range(4 * c, 4 * c + 4):
                await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_for(10.0)
    await producer
    st = s.buf.stats()
    assert st.repeats > 0 and st.drops > 0 and st.holds > 0
    assert st.delay > 0.28
    assert st.frames_shown + st.drops == st.frames_in == 4 * len(jitter)
    assert st.deadline_misses == st.repeats + st.drops
    # Measured at every release, pairing each heard packet with the frame on screen at its due time.
    assert all(abs(off) <= 1 / FPS for _, _, off in s.offsets)
    check_av(s)
    silent = [out for _, out in s.audio if not out.inserted and not out.pcm.any()]
    assert silent, "missing frames are heard as silence"
    await s.stop()


async def test_put_blocks_while_full_and_resumes_once_played() -> None:
    s = Session(PlayoutConfig(capacity_frames=4))
    for i in range(4):
        assert s.buf.put_nowait(frame(i))
    assert not s.buf.put_nowait(frame(4))
    done_at: list[float] = []

    async def put_fifth() -> None:
        await s.buf.put(frame(4))
        done_at.append(s.clock.now())

    blocked = asyncio.create_task(put_fifth())
    L = s.buf.stats().delay
    await s.clock.run_until(due(s.buf, L))
    assert not blocked.done() and s.buf.stats().depth == 4  # frame 0 on screen, its audio half played
    await s.clock.run_until(due(s.buf, L + 0.02))
    assert blocked.done() and done_at == [pytest.approx(T0 + L + 0.02)]
    assert s.buf.stats().depth == 4
    await s.clock.run_until(due(s.buf, L + 4 / FPS))
    assert s.shown() == [0, 1, 2, 3, 4]
    await s.stop()


async def test_video_only_consumer_frees_frames_once_their_time_is_over() -> None:
    s = Session(PlayoutConfig(capacity_frames=2), audio=False)
    s.buf.put_nowait(frame(0))
    s.buf.put_nowait(frame(1))
    blocked = asyncio.create_task(s.buf.put(frame(2)))
    L = s.buf.stats().delay
    await s.clock.run_until(due(s.buf, L + 0.02))
    assert not blocked.done()
    await s.clock.run_until(due(s.buf, L + 1 / FPS))
    assert blocked.done()
    assert s.shown() == [0, 1]
    await s.stop()


async def test_late_consumer_resumes_at_the_current_slot_without_bursting() -> None:
    clock = FakeClock(T0)
    buf = PlayoutBuffer(PlayoutConfig(), clock)
    for i in range(12):
        buf.put_nowait(frame(i))
    L = buf.stats().delay
    await clock.run_until(T0 + L + 5 / FPS + 0.01)
    out = await buf.next_video()
    assert (out.media_slot, out.frame_index, out.repeated) == (5, 5, False)
    assert out.due == pytest.approx(T0 + L + 5 / FPS)
    assert buf.stats().drops == 5
    nxt = asyncio.create_task(buf.next_video())
    await clock.run_until(T0 + L + 6 / FPS - 0.001)
    assert not nxt.done()
    await clock.run_until(T0 + L + 6 / FPS)
    assert (await nxt).frame_index == 6
    buf.close()


async def test_close_wakes_blocked_consumers_and_producers() -> None:
    clock = FakeClock(T0)
    buf = PlayoutBuffer(PlayoutConfig(capacity_frames=1), clock)
    waiting = [asyncio.create_task(buf.next_video()), asyncio.create_task(buf.next_audio())]
    await clock.run_for(0)
    buf.put_nowait(frame(0))
    await clock.run_for(0.1)  # both now sleep until t0 + L
    blocked = asyncio.create_task(buf.put(frame(1)))
    await clock.run_for(0)
    assert not any(t.done() for t in [*waiting, blocked])
    buf.close()
    for task in [*waiting, blocked]:
        with pytest.raises(PlayoutClosed):
            await task
    assert clock.sleepers == 0
    with pytest.raises(PlayoutClosed):
        await buf.next_video()
    with pytest.raises(PlayoutClosed):
        buf.put_nowait(frame(2))


async def test_close_before_any_frame_wakes_consumers() -> None:
    clock = FakeClock()
    buf = PlayoutBuffer(PlayoutConfig(), clock)
    waiting = [asyncio.create_task(buf.next_video()), asyncio.create_task(buf.next_audio())]
    await clock.run_for(0)
    buf.close()
    for task in waiting:
        with pytest.raises(PlayoutClosed):
            await task


def test_rejects_frames_and_configs_that_do_not_fit() -> None:
    buf = PlayoutBuffer(PlayoutConfig(fps=30), FakeClock())
    with pytest.raises(ValueError):
        buf.put_nowait(frame(0))
    with pytest.raises(ValueError):
        PlayoutConfig(min_delay=0.5, initial_delay=0.25)
    with pytest.raises(ValueError):
        PlayoutConfig(sample_rate=22050, audio_packet_ms=15)
    assert PlayoutConfig(fps=30).quantum == Fraction(1, 10)


async def test_runs_on_the_real_monotonic_clock() -> None:
    buf = PlayoutBuffer(PlayoutConfig(initial_delay=0.04, min_delay=0.04))
    for i in range(3):
        buf.put_nowait(frame(i))
    outs = [await buf.next_video() for _ in range(3)]
    packet = await buf.next_audio()
    assert buf.t0 is not None and time.monotonic() >= outs[-1].due
    assert outs[0].due == pytest.approx(buf.t0 + 0.04)
    slots = [out.media_slot for out in outs]
    assert slots == sorted(set(slots)), "a loaded machine may skip a slot, never reorder or repeat one"
    assert packet.pcm.dtype == np.int16
    buf.close()


# ------------------------------------------------------------------ late consumers


async def test_late_audio_consumer_within_tolerance_gets_every_packet_back_to_back() -> None:
    # Every 10th packet the audio "encoder" is busy 50 ms, so the next pull comes 30 ms after its
    # deadline: more than a packet period late, well within the 200 ms tolerance.
    s = Session(PlayoutConfig(steady_after_s=60.0), audio_work=lambda n: 0.05 if n % 10 == 5 else 0.0)

    async def produce() -> None:
        for c in range(45):
            await s.clock.sleep_until(T0 + c * 0.16)
            for i in range(4 * c, 4 * c + 4):
                await s.buf.put(frame(i))

    producer = asyncio.create_task(produce())
    await s.clock.run_until(T0 + 0.28 + 179 / FPS)  # the last frame's slot
    await producer
    st = s.buf.stats()
    assert st.audio_skipped == 0 and st.video_skipped == 0 and st.deadline_misses == 0
    late = [(released - out.due, out) for released, out in s.audio]
    assert max(d for d, _ in late) == pytest.approx(0.03)
    assert sum(1 for d, _ in late if d > 1e-9) == 2 * sum(1 for d, _ in late if d > 0.02 + 1e-9)
    for (released, out), (next_released, nxt) in zip(s.audio, s.audio[1:], strict=False):
        if released > out.due + 1e-9 and nxt.due < released:
            assert next_released == released, "the missed packets follow at once, back to back"
    check_av(s, audio_late=0.03)  # every packet, each with its own frame's samples
    # The A/V offset measured at release shows exactly how much later the audio went out.
    audio_offsets = [(released, off) for kind, released, off in s.offsets if kind == "audio"]
    for (released, out), (_, off) in zip(s.audio, audio_offsets, strict=True):
        assert off == pytest.approx(released - out.due, abs=1e-9)
    assert max(off for _, off in audio_offsets) == pytest.approx(0.03)
    await s.stop()


async def test_audio_consumer_later_than_tolerance_skips_ahead_and_counts_it() -> None:
    s = Session(audio_work=lambda n: 0.5 if n == 20 else 0.0)
    for i in range(100):
        s.buf.put_nowait(frame(i))
    await s.clock.run_for(2.0)
    st = s.buf.stats()
    indices = [out.index for _, out in s.audio]
    jumps = [(a, b) for a, b in zip(indices, indices[1:], strict=False) if b != a + 1]
    assert len(jumps) == 1
    a, b = jumps[0]
    assert st.audio_skipped == b - a - 1 == 24  # 0.5 s busy: 25 packets due meanwhile, one of them still in time
    released, out = next((r, o) for r, o in s.audio if o.index == b)
    assert out.due <= released < out.due + 0.02, "resumes at the packet due now, not a burst of old ones"
    assert released == pytest.approx(s.audio[20][0] + 0.5)
    for released, out in s.audio:
        assert released >= out.due - 1e-9
        np.testing.assert_array_equal(out.pcm, ramp(out.media_sample, out.media_sample + PKT))
    assert s.shown() == list(range(len(s.shown()))) and st.drops == 0, "video did not notice"
    await s.stop()


async def test_video_consumer_a_little_late_drops_nothing() -> None:
    # The video "encoder" is busy 75 ms after the first frame, then 40 ms (one period) per frame:
    # from then on every pull comes 35 ms after its deadline.
    s = Session(video_work=lambda n: 0.075 if n == 0 else 0.04)
    for i in range(40):
        s.buf.put_nowait(frame(i))
    await s.clock.run_for(1.0)
    st = s.buf.stats()
    assert st.drops == 0 and st.video_skipped == 0
    shown = s.shown()
    assert shown == list(range(len(shown))) and len(shown) >= 16
    assert [round(released - out.due, 6) for released, out in s.video][1:] == [0.035] * (len(s.video) - 1)
    check_av(s, video_late=0.035)
    # Audio for media time t now goes out before the video for t, by the video's lateness.
    audio_offsets = [off for kind, _, off in s.offsets if kind == "audio"]
    assert audio_offsets[-1] == pytest.approx(-0.035)
    assert all(-0.035 - 1e-9 <= off <= 1e-9 for off in audio_offsets)
    await s.stop()


async def test_video_tolerance_is_configurable_and_beyond_it_the_consumer_skips() -> None:
    busy = {5: 0.1}  # after slot 5 the consumer is away 100 ms: the next pull is 60 ms late
    tolerant = Session(PlayoutConfig(video_late_tolerance_s=0.08), video_work=lambda n: busy.get(n, 0.0))
    strict = Session(video_work=lambda n: busy.get(n, 0.0))
    for s in (tolerant, strict):
        for i in range(20):
            s.buf.put_nowait(frame(i))
        await s.clock.run_for(1.0)
    assert tolerant.shown()[:12] == list(range(12)) and tolerant.buf.stats().drops == 0
    (r6, o6), (r7, o7) = tolerant.video[6], tolerant.video[7]
    assert r6 == r7 == pytest.approx(o6.due + 0.06) and o7.due == pytest.approx(o6.due + 0.04)
    st = strict.buf.stats()
    assert strict.shown()[:11] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11]
    assert (st.video_skipped, st.drops) == (1, 1)
    for s in (tolerant, strict):
        assert all(released >= out.due - 1e-9 for released, out in s.video), "never before the deadline"
        await s.stop()


# ------------------------------------------------------------------ resync


def stalled_producer(s: Session, stall_after_chunk: int, stall: float, chunks: int = 150):
    """Four frames every 160 ms, a little ahead of real time; from one chunk on, ``stall`` s later."""
    arrived: dict[int, float] = {}

    async def produce() -> None:
        for c in range(chunks):
            await s.clock.sleep_until(T0 + c * 0.16 + (stall if c >= stall_after_chunk else 0.0))
            for i in range(4 * c, 4 * c + 4):
                await s.buf.put(frame(i))
                arrived[i] = s.clock.now()

    return asyncio.create_task(produce()), arrived


async def test_engine_stalled_longer_than_max_delay_is_resynced_and_shown_again() -> None:
    s = Session()
    producer, arrived = stalled_producer(s, 12, 3.0, chunks=70)  # frames 48.. come 3 s late
    misses: list[tuple[float, int]] = []
    delays: list[tuple[float, float]] = []
    for _ in range(330):
        await s.clock.run_for(0.05)
        misses.append((s.clock.now(), s.buf.stats().deadline_misses))
        delays.append((s.clock.now(), s.buf.stats().delay))
    producer.cancel()
    st = s.buf.stats()
    assert st.resyncs == 1
    L = 1.48  # the maximum, reached while the engine was stalled
    assert max(d for _, d in delays) == pytest.approx(L)
    # Frame 48 came 1.52 s after its deadline (later than max_delay): it was re-based to play L
    # after its arrival instead of being dropped, and everything after it plays too.
    shown = s.shown()
    assert shown[:49] == list(range(49))
    when = {out.frame_index: released for released, out in s.video if not out.repeated}
    assert when[48] == pytest.approx(arrived[48] + L)
    after = [i for i in shown if i >= 48]
    assert len(after) >= 200 and st.drops == 0
    assert after[-1] == 279 and len(after) + st.skips == 280 - 48
    # The wait for frame 48 was an inserted hold (frame 47 on screen, silence), not misses.
    gap = [out for released, out in s.video if arrived[48] <= released < when[48]]
    assert gap and all(out.inserted and out.frame_index == 47 for out in gap)
    resync_holds = st.holds
    # Misses stopped growing once the engine was back: none after the resync.
    resynced_at, last_due = arrived[48], when[279]
    assert len({m for t, m in misses if resynced_at <= t <= last_due}) == 1
    assert s.buf.stats().holds == resync_holds
    check_av(s)  # audio shifted with its video: every packet due with its frame, samples intact
    heard = [out for _, out in s.audio if out.pcm.any() and out.media_sample // SPF >= 48]
    assert len(heard) == 2 * (280 - 48 - st.skips) and heard[0].due == pytest.approx(when[48])
    await s.stop()


async def test_late_arrivals_at_max_delay_resync_after_a_few() -> None:
    cfg = PlayoutConfig(max_delay=0.6, resync_after_late=5)
    s = Session(cfg)
    producer, arrived = stalled_producer(s, 12, 1.2, chunks=45)  # 1.2 s: late, but less than max_delay
    await s.clock.run_for(9.5)
    producer.cancel()
    st = s.buf.stats()
    assert st.resyncs == 1 and st.delay == pytest.approx(0.6)
    # Four late frames are dropped while L is at its maximum; the fifth one in a row resyncs.
    assert st.drops == 4
    shown = s.shown()
    assert [i for i in range(48, 56) if i in shown] == [52, 53, 54, 55]
    when = {out.frame_index: released for released, out in s.video if not out.repeated}
    assert when[52] == pytest.approx(arrived[52] + 0.6)
    after = shown[shown.index(52) :]
    assert after == sorted(set(after)) and after[-1] == 179
    assert len(after) + st.skips == 180 - 52, "everything after the resync is shown (or skipped as L shrinks)"
    check_av(s)
    await s.stop()


async def test_no_resync_while_raising_the_delay_can_still_catch_up() -> None:
    s = Session()
    producer, _ = stalled_producer(s, 12, 0.5, chunks=60)
    await s.clock.run_for(10.0)
    producer.cancel()
    st = s.buf.stats()
    assert st.resyncs == 0 and st.deadline_misses > 0
    check_av(s)
    await s.stop()


async def test_old_frame_arriving_late_does_not_resync() -> None:
    s = Session()
    for i in range(10):
        s.buf.put_nowait(frame(i))
    await s.clock.run_for(4.0)
    s.buf.put_nowait(frame(10))  # 2.1 s late (more than max_delay), the newest: resync
    assert s.buf.stats().resyncs == 1
    await s.clock.run_for(0.04)
    s.buf.put_nowait(frame(3))  # a stale one long gone: just dropped
    st = s.buf.stats()
    assert st.resyncs == 1 and st.drops == 1
    await s.stop()
