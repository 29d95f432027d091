"""Session parts on their own: the event queues' drop policy, and a recording that cannot keep up."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from engine.frames import PublishedFrame
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, MetricsEvent, PlaybackFinished, PlaybackStarted, SessionReady
from server.media.playout import PlayoutBuffer, PlayoutConfig
from server.media.recorder import MP4Recorder
from server.session.events import EVENT_QUEUE, EventQueue, SessionEvents
from server.session.generated import GeneratedFrames
from server.session.liveness import Liveness

FPS, SR = 25, 16000


def metrics_event(n: int = 0) -> MetricsEvent:
    return MetricsEvent(fps=25.0, playout_delay_ms=250.0, buffer_depth=n, deadline_misses=0, frames_played=0,
                        frames_generated=0, engine_backlog_ms=0.0, av_offset_ms=0.0, mic_seconds=0.0,
                        engine_state_bytes=0)


def dropped(metrics: ServerMetrics, kind: str) -> float:
    return metrics.registry.get_sample_value("avatar_events_dropped_total", {"type": kind}) or 0.0


async def test_a_full_event_queue_drops_metrics_before_anything_else() -> None:
    gone = []
    queue = EventQueue(4, gone.append)
    queue.put(metrics_event(1))
    queue.put(PlaybackStarted(utterance_id="a", pts=0.0))
    queue.put(metrics_event(2))
    queue.put(ErrorEvent(code="x", message="y"))
    queue.put(PlaybackFinished(utterance_id="a", pts=1.0))  # full: the oldest metrics event goes
    queue.put(PlaybackStarted(utterance_id="b", pts=1.0))  # and then the other one
    assert [e.buffer_depth for e in gone] == [1, 2]
    queue.put(metrics_event(3))  # only protected events are left: the newcomer is the one dropped
    assert gone[-1].buffer_depth == 3 and len(queue) == 4
    queue.put(PlaybackFinished(utterance_id="b", pts=2.0))  # no metrics at all: the oldest goes
    assert isinstance(gone[-1], PlaybackStarted) and gone[-1].utterance_id == "a"
    got = [await queue.get() for _ in range(4)]
    assert [e.type for e in got] == ["error", "playback.finished", "playback.started", "playback.finished"]


async def test_session_events_count_drops_by_type_and_keep_playback_events() -> None:
    metrics = ServerMetrics()
    started = asyncio.Event()
    ready = SessionReady(session_id="s", mode="agent", avatar="ada", fps=FPS, sample_rate=SR, width=8, height=8)
    events = SessionEvents(metrics, lambda: ready, started)
    observer = events.observe()
    assert observer is not None
    for i in range(EVENT_QUEUE):
        events.emit(metrics_event(i))
    events.emit(PlaybackStarted(utterance_id="u", pts=0.5))  # nobody reads: a metrics event makes room
    events.emit(PlaybackFinished(utterance_id="u", pts=1.5))
    assert dropped(metrics, "metrics") == 4  # two from the control queue, two from the observer's
    assert dropped(metrics, "playback.started") == 0 and dropped(metrics, "playback.finished") == 0
    got = [await events.next() for _ in range(EVENT_QUEUE)]
    assert [e.type for e in got[-2:]] == ["playback.started", "playback.finished"]
    assert b'avatar_events_dropped_total{type="metrics"} 4.0' in metrics.render()


def frame(index: int) -> PublishedFrame:
    return PublishedFrame(index=index, fps=FPS, rgb=np.zeros((16, 16, 3), np.uint8),
                          audio=np.zeros(SR // FPS, np.float32), sample_rate=SR, chunk="N0")


class StalledWriter:
    """An MP4 writer on a disk that does not keep up: each write waits until the test lets it go."""

    release = threading.Event()
    written: list[int] = []

    def __init__(self, *args) -> None:
        pass

    def write(self, frame: PublishedFrame) -> None:
        self.release.wait(10)
        self.written.append(frame.index)

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def test_a_recording_that_falls_behind_drops_frames_instead_of_failing_the_session(monkeypatch, tmp_path):
    StalledWriter.release.clear()
    StalledWriter.written.clear()
    metrics = ServerMetrics()
    recorder = MP4Recorder(tmp_path / "s.mp4", StalledWriter, FPS, SR, queue_frames=8)
    playout = PlayoutBuffer(PlayoutConfig(fps=FPS, sample_rate=SR))
    connected = asyncio.Event()
    generated = GeneratedFrames(playout, recorder, connected, metrics)
    generated.on_generated([frame(i) for i in range(30)])  # returns at once, however slow the disk
    assert generated.samples == 30 * SR // FPS
    assert 30 - 8 - 1 <= recorder.frames_dropped <= 30 - 8
    assert metrics.registry.get_sample_value("avatar_recorder_frames_dropped_total") == recorder.frames_dropped
    StalledWriter.release.set()
    await asyncio.to_thread(recorder.close)
    assert recorder.error is None and len(StalledWriter.written) == 30 - recorder.frames_dropped
    playout.close()


def test_liveness_notes_each_instant_where_it_belongs() -> None:
    times = Liveness()
    assert times.first_frame() is None and times.first_frame_at is None  # no offer, no first frame
    times.offered()
    first = times.first_frame()
    assert first is not None and first == times.first_frame_at >= times.offered_at >= times.created_at
    assert times.first_frame() is None and times.first_frame_at == first  # noted once
    times.viewer_offered()
    since = times.viewers_waiting_since
    times.viewer_offered()  # offering again does not restart the wait
    assert since is not None and times.viewers_waiting_since == since
    times.viewer_connected()
    assert times.viewers_waiting_since is None
    times.engine_started()
    assert times.engine_started_at is not None
