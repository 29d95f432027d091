"""The audio-in pipeline alone: a microphone track or an agent's PCM in, blocks fed to a fake engine port."""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import time

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from server.base.metrics import ServerMetrics
from server.base.protocol import SessionCreate
from server.session.inbound import Inbound
from tests.pipeline_helpers import RATE, FakeEngine
from tests.server_helpers import make_settings, wait_until

MIC_RATE = 48000


class ToneTrack(MediaStreamTrack):
    """A browser microphone: ``seconds`` of a sine as 20 ms s16 stereo 48 kHz frames, each when it
    would have been spoken (the intake's buffer holds only a moment), then the end."""

    kind = "audio"

    def __init__(self, hz: float, seconds: float, amplitude: float = 0.3) -> None:
        super().__init__()
        t = np.arange(int(MIC_RATE * seconds)) / MIC_RATE
        self._pcm = (amplitude * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)
        self._at = 0
        self._t0: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self._at >= self._pcm.size:
            raise MediaStreamError
        chunk = self._pcm[self._at:self._at + 960]
        frame = av.AudioFrame.from_ndarray(np.repeat(chunk, 2)[None, :], format="s16", layout="stereo")
        frame.sample_rate, frame.pts, frame.time_base = MIC_RATE, self._at, fractions.Fraction(1, MIC_RATE)
        self._t0 = time.monotonic() if self._t0 is None else self._t0
        await asyncio.sleep(max(0.0, self._t0 + self._at / MIC_RATE - time.monotonic()))
        self._at += chunk.size
        return frame


def dominant_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / RATE)[int(spectrum.argmax())])


def inbound_of(mode: str, engine: FakeEngine) -> tuple[Inbound, list, list]:
    heard, events = [], []
    inbound = Inbound("s", SessionCreate(mode=mode), make_settings(), engine, lambda: engine.fed, ServerMetrics(),
                      events.append, heard.append, lambda t, start, samples: None)
    return inbound, heard, events


@contextlib.asynccontextmanager
async def running(inbound: Inbound, *tasks):
    inbound.feeder.start(time.monotonic())
    running_tasks = [asyncio.create_task(t) for t in (inbound.feed_loop.run(), inbound.voice.run(), *tasks)]
    try:
        yield
    finally:
        for task in running_tasks:
            task.cancel()
        await asyncio.gather(*running_tasks, return_exceptions=True)


async def test_mirror_mode_feeds_the_microphone_resampled_in_order() -> None:
    engine = FakeEngine()
    inbound, heard, _ = inbound_of("mirror", engine)
    async with running(inbound, inbound.microphone.consume(ToneTrack(440.0, 1.0))):
        assert await wait_until(lambda: engine.fed >= int(0.9 * RATE), 10.0), f"fed {engine.fed} samples"
    starts = [start for start, _ in engine.blocks]
    ends = [start + block.size for start, block in engine.blocks]
    assert starts[0] == 0 and starts[1:] == ends[:-1], "blocks are contiguous on the timeline"
    assert abs(inbound.microphone.samples - RATE) <= 960, "the intake counts what it heard, at the engine's rate"
    assert sum(h.size for h in heard) == inbound.microphone.samples
    timeline = engine.timeline()
    loud = np.flatnonzero(np.abs(timeline) > 0.01)
    voiced = timeline[loud[0]:loud[-1] + 1]
    assert voiced.size >= 0.8 * RATE
    assert abs(dominant_hz(voiced) - 440.0) < 5.0
    # The downmix of the decoder's two equal channels to mono is 3 dB up: sqrt(2) times the tone's level.
    assert 0.8 < np.sqrt(np.mean(voiced ** 2)) / (0.3 / np.sqrt(2)) < 1.6


async def test_agent_mode_feeds_the_agents_audio_exactly_and_not_the_microphone() -> None:
    engine = FakeEngine()
    inbound, heard, _ = inbound_of("agent", engine)
    rng = np.random.default_rng(1)
    pcm = (rng.uniform(-0.5, 0.5, int(0.5 * RATE)) * 32767).astype(np.int16)
    async with running(inbound, inbound.microphone.consume(ToneTrack(440.0, 1.0))):
        inbound.voice.append_audio(pcm.tobytes(), RATE, "u1")
        inbound.voice.commit_audio("u1")
        assert await wait_until(lambda: engine.fed >= int(1.0 * RATE), 10.0), f"fed {engine.fed} samples"
    timeline = engine.timeline()
    voiced = np.flatnonzero(timeline)
    assert voiced.size, "the agent's audio was fed"
    first = int(voiced[0])
    np.testing.assert_allclose(timeline[first:first + pcm.size], pcm / 32768.0, atol=1e-4)
    assert not timeline[first + pcm.size:].any(), "silence after the utterance: the microphone is never fed"
    assert not timeline[:first].any()
    assert sum(h.size for h in heard) == inbound.microphone.samples > 0, "the microphone was still heard"


async def test_an_interrupt_tells_the_engine_where_the_voice_was_cut() -> None:
    engine = FakeEngine()
    inbound, _, _ = inbound_of("agent", engine)
    pcm = np.full(int(2.0 * RATE), 8000, np.int16)
    async with running(inbound):
        inbound.voice.append_audio(pcm.tobytes(), RATE, "long")
        inbound.voice.commit_audio("long")
        assert await wait_until(lambda: engine.fed >= int(0.5 * RATE), 10.0)
        cut = inbound.voice.interrupt()
        fed_at_cut = engine.fed
        assert await wait_until(lambda: engine.fed >= fed_at_cut + int(0.3 * RATE), 10.0)
    assert engine.silenced == [cut]
    assert not engine.timeline()[fed_at_cut:].any(), "nothing of the dropped speech is fed after the cut"
