"""Playout jitter buffer on a fake clock: which frame goes out in which slot, at what time."""

from __future__ import annotations

import asyncio
import time
from fractions import Fraction

import numpy as np
import pytest

from engine.frames import PublishedFrame
from server.clock import FakeClock
from server.playout import AudioOut, PlayoutBuffer, PlayoutClosed, PlayoutConfig, VideoOut

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


class Session:
    """A buffer on a fake clock with both tracks consumed into lists of (release time, output)."""

    def __init__(self, config: PlayoutConfig | None = None, audio: bool = True) -> None:
        self.clock = FakeClock(T0)
        self.buf = PlayoutBuffer(config or PlayoutConfig(), self.clock)
        self.video: list[tuple[float, VideoOut]] = []
        self.audio: list[tuple[float, AudioOut]] = []
        self.tasks = [asyncio.create_task(self._consume(self.buf.next_video, self.video))]
        if audio:
            self.tasks.append(asyncio.create_task(self._consume(self.buf.next_audio, self.audio)))

    async def _consume(self, pull, sink: list) -> None:
        while True:
            try:
                out = await pull()
            except PlayoutClosed:
                return
            sink.append((self.clock.now(), out))

    async def stop(self) -> None:
        self.buf.close()
        await asyncio.gather(*self.tasks)

    def shown(self) -> list[int]:
        return [out.frame_index for _, out in self.video if not out.repeated]


def check_av(s: Session) -> None:
    """Audio carries exactly the samples of the frames video showed, at the same instants."""
    t0 = s.buf.t0
    assert t0 is not None
    shown = set(s.shown())
    when_shown = {out.frame_index: out.due for _, out in s.video if not out.repeated}
    for released, out in s.video:
        assert released == pytest.approx(out.due, abs=1e-9)
        assert out.due == pytest.approx(t0 + out.slot / FPS, abs=1e-9)
    slots = [out.slot for _, out in s.video]
    assert slots == list(range(slots[0], slots[0] + len(slots))), "one video frame per slot, no gaps"
    indices = [out.index for _, out in s.audio]
    assert indices == list(range(indices[0], indices[0] + len(indices))), "one packet per 20 ms, no gaps"
    for released, out in s.audio:
        assert released == pytest.approx(out.due, abs=1e-9)
        assert out.due == pytest.approx(t0 + out.index * 0.02, abs=1e-9)
        assert out.pcm.dtype == np.int16 and out.pcm.shape == (PKT,)
        assert out.pts == out.index * PKT
        if out.inserted:
            assert not out.pcm.any()
            continue
        start = out.media_sample
        expected = ramp(start, start + PKT)
        owner = np.arange(start, start + PKT) // SPF
        expected[~np.isin(owner, list(shown))] = 0
        np.testing.assert_array_equal(out.pcm, expected)
        if start % SPF == 0 and start // SPF in when_shown:
            assert out.due == pytest.approx(when_shown[start // SPF], abs=1e-9), "audio plays with its video"
    assert s.buf.stats().av_offset == 0.0


async def test_fake_clock_wakes_sleepers_at_their_deadlines() -> None:
    clock = FakeClock(5.0)
    woke: list[float] = []

    async def sleeper(t: float) -> None:
        await clock.sleep_until(t)
        woke.append(clock.now())

    tasks = [asyncio.create_task(sleeper(t)) for t in (5.3, 5.1, 5.2)]
    await asyncio.sleep(0)
    clock.advance(0.05)
    await asyncio.sleep(0)
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
    # The raise (target 0.25 + 0.1, rounded up) starts at the next slot for both tracks.
    await s.clock.run_for(0.04)
    raised = s.buf.stats().delay
    assert raised == pytest.approx(0.36)
    for i in range(6, 10):
        assert s.buf.put_nowait(frame(i))
    await s.clock.run_until(due(s.buf, raised + Fraction(9, FPS)))
    holds = [out for _, out in s.video if out.inserted]
    assert len(holds) == 2 and all(o.frame_index == 4 and o.repeated for o in holds)
    assert s.shown() == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    released = {out.frame_index: t for t, out in s.video if not out.repeated}
    assert released[6] == pytest.approx(T0 + raised + 6 / FPS)
    assert released[9] == pytest.approx(T0 + raised + 9 / FPS)
    assert s.buf.stats().holds == 2
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
    await s.clock.run_until(due(s.buf, 0.36 + 4 / FPS))
    st = s.buf.stats()
    assert raised == pytest.approx(0.35) and st.delay == pytest.approx(0.36)
    assert (st.frames_in, st.drops, st.repeats, st.deadline_misses) == (5, 1, 1, 2)
    assert s.shown() == [0, 1, 2, 4]
    assert [out.frame_index for _, out in s.video if out.media_slot == 3 and not out.inserted] == [2]
    assert s.video[-1][0] == pytest.approx(T0 + 0.36 + 4 / FPS)
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
    assert st.av_offset == 0.0
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
    buf = PlayoutBuffer(PlayoutConfig(), FakeClock())
    waiting = [asyncio.create_task(buf.next_video()), asyncio.create_task(buf.next_audio())]
    await asyncio.sleep(0)
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
