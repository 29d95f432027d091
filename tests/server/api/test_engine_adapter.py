"""The adapter over the engine's client: one session's frames delivered to its sink a chunk at a
time, the engine's errors raised as the server's, audio and deadlines passed on, and photographs
prepared with the server's errors."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from image_helpers import encode
from PIL import Image
from server_helpers import wait_until

from engine.frames import PublishedFrame
from engine.service.client import EngineError as EngineClientError
from server.api.engine_adapter import ORIGIN_TOLERANCE_S, Engine, EngineLink, sample_rate_of, server_errors
from server.base.engine_port import EngineError, ImageBounds, ImageTooLargeError, UnusableImage

FPS, SR = 25, 16000


class FakeStream:
    """An engine stream whose frames the test queues (None: the engine lost the session)."""

    def __init__(self, frames_per_chunk: int = 4) -> None:
        self.info = SimpleNamespace(fps=FPS, sample_rate=SR)
        self.slots = SimpleNamespace(height=48, width=32)
        self.frames_per_chunk = frames_per_chunk
        self.first_chunk_samples = 9600
        self.lookahead_samples = 2560
        self.state_bytes = 1234
        self.quality_events: asyncio.Queue = asyncio.Queue()
        self.refs: asyncio.Queue[PublishedFrame | None] = asyncio.Queue()
        self.sent: list[tuple] = []
        self.closed = False

    async def next_frame(self) -> PublishedFrame:
        frame = await self.refs.get()
        if frame is None:
            raise EngineClientError("worker_lost", "the engine worker died")
        return frame

    def pending(self) -> int:
        return self.refs.qsize()

    def push_audio(self, start: int, samples: np.ndarray) -> None:
        self.sent.append(("audio", start, samples.size))

    def silence_from(self, sample: int) -> None:
        self.sent.append(("silence", sample))

    def set_origin(self, origin: float) -> None:
        self.sent.append(("origin", origin))

    async def close(self) -> None:
        self.closed = True


class Sink:
    """Records the frame indices of each call, as arrived and as put."""

    def __init__(self) -> None:
        self.arrived: list[list[int]] = []
        self.taken: list[list[int]] = []

    def on_generated(self, frames: list[PublishedFrame]) -> None:
        self.arrived.append([f.index for f in frames])

    async def put(self, frames: list[PublishedFrame]) -> None:
        self.taken.append([f.index for f in frames])


def frame(i: int) -> PublishedFrame:
    return PublishedFrame(i, FPS, np.zeros((48, 32, 3), np.uint8), np.zeros(SR // FPS, np.float32), SR, "N1")


async def test_frames_reach_the_sink_a_chunk_at_a_time_until_the_engine_loses_the_session() -> None:
    stream = FakeStream(frames_per_chunk=4)
    link = EngineLink(stream, "fast", "s_1")  # type: ignore[arg-type]
    for i in range(6):
        stream.refs.put_nowait(frame(i))
    sink = Sink()
    delivering = asyncio.create_task(link.deliver(sink))
    assert await wait_until(lambda: len(sink.taken) == 2, 5.0)  # a chunk's worth, then what had arrived
    stream.refs.put_nowait(None)
    with pytest.raises(EngineError) as lost:
        await delivering
    assert (lost.value.code, lost.value.message) == ("worker_lost", "the engine worker died")
    assert isinstance(lost.value.__cause__, EngineClientError)  # the engine's error, raised as the server's
    assert sink.arrived == [[0, 1, 2, 3], [4, 5]] and sink.taken == sink.arrived


async def test_audio_interrupts_and_deadlines_are_passed_on_small_deadline_moves_are_not() -> None:
    stream = FakeStream()
    link = EngineLink(stream, "fast", "s_1", drawn=True)  # type: ignore[arg-type]
    assert (link.frame_size, link.first_chunk_samples, link.lookahead_samples, link.nbytes(), link.drawn) == (
        (48, 32), 9600, 2560, 1234, True)
    link.feed(0, np.zeros(0, np.float32))  # nothing to feed: no message
    link.feed(0, np.zeros(320, np.float32))
    link.silence_from(160)
    link.set_origin(None)
    link.set_origin(10.0)
    link.set_origin(10.0 + ORIGIN_TOLERANCE_S / 2)
    link.set_origin(10.1)
    assert stream.sent == [("audio", 0, 320), ("silence", 160), ("origin", 10.0), ("origin", 10.1)]
    await link.close()
    assert stream.closed


async def test_quality_changes_reach_their_callback() -> None:
    stream = FakeStream()
    link = EngineLink(stream, "fast", "s_1")  # type: ignore[arg-type]
    seen: list = []
    task = asyncio.create_task(link.quality_changes(seen.append))
    change = SimpleNamespace(level=1, name="fewer-steps", reason="behind")
    stream.quality_events.put_nowait(change)
    assert await wait_until(lambda: seen, 5.0)
    task.cancel()
    assert seen == [change]


def test_the_engines_errors_are_raised_as_the_servers() -> None:
    with pytest.raises(EngineError) as caught, server_errors():
        raise EngineClientError("at_capacity", "every worker is full", retry_after_s=9)
    assert (caught.value.code, caught.value.retry_after_s) == ("at_capacity", 9)
    with pytest.raises(KeyError), server_errors():  # any other error passes as it is
        raise KeyError("x")


def test_an_engine_no_worker_has_started_says_so_and_the_rate_is_known_before() -> None:
    engine = Engine(SimpleNamespace(info=None, workers=lambda: []))  # type: ignore[arg-type]
    assert not engine.available
    with pytest.raises(EngineError) as caught:
        engine.info  # noqa: B018
    assert caught.value.code == "engine_unavailable"
    assert sample_rate_of("tiny") == 16000
    with pytest.raises(KeyError):
        sample_rate_of("no-such-config")


def test_photographs_are_refused_with_the_servers_errors() -> None:
    engine = Engine(SimpleNamespace(info=None))  # type: ignore[arg-type]
    wall = encode(Image.fromarray(np.full((200, 200, 3), 120, np.uint8)), "PNG")
    with pytest.raises(UnusableImage, match="face"):
        engine.photo_avatar(wall, ImageBounds(4096, 4096 * 4096, 64))
    with pytest.raises(ImageTooLargeError):
        engine.photo_avatar(wall, ImageBounds(100, 100 * 100, 64))
    with pytest.raises(UnusableImage):
        engine.photo_avatar(b"not an image", ImageBounds(4096, 4096 * 4096, 64))
