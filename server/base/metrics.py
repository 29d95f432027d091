"""Prometheus metrics for ``GET /metrics``.

Each app owns its own registry, so several apps (tests) never collide on metric names and
nothing leaks through the module-level default registry.
"""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "EngineMetrics", "MediaMetrics", "ServerMetrics"]


class ServerMetrics:
    """Every figure of one app, in its own registry: the process, sessions, control and voice here,
    the media pipelines' in ``media``, the engine workers' in ``engine``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # process_resident_memory_bytes, process_open_fds, ...: what a long soak must see stay flat.
        ProcessCollector(registry=r)
        self.threads = Gauge("avatar_server_threads", "Threads of the server process", registry=r)
        self.threads.set_function(threading.active_count)
        self.tasks = Gauge("avatar_server_tasks", "Asyncio tasks of the server's event loop", registry=r)
        self.media = MediaMetrics(r)
        self.engine = EngineMetrics(r)
        self.sessions_active = Gauge("avatar_sessions_active", "Avatar sessions alive now", registry=r)
        self.sessions_created = Counter("avatar_sessions_created", "Sessions created", registry=r)
        self.sessions_rejected = Counter(
            "avatar_sessions_rejected", "Session creations refused", ["reason"], registry=r
        )
        self.sessions_closed = Counter("avatar_sessions_closed", "Sessions closed", ["reason"], registry=r)
        self.quality_changes = Counter(
            "avatar_quality_changes", "Sessions moved along the engine's quality ladder", ["reason"], registry=r
        )
        self.speech_seconds = Counter("avatar_speech_audio_seconds", "Agent speech queued", registry=r)
        self.tts_seconds = Histogram(
            "avatar_tts_seconds",
            "Text-to-speech synthesis time",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0),
        )
        self.control_messages = Counter(
            "avatar_control_messages", "Control messages received", ["type"], registry=r
        )
        self.errors = Counter("avatar_errors", "Errors reported to clients", ["code"], registry=r)
        self.events_dropped = Counter(
            "avatar_events_dropped", "Session events dropped from a full queue (its reader fell behind)", ["type"],
            registry=r,
        )

    def render(self) -> bytes:
        """The metrics text (called on the event loop, whose tasks it counts)."""
        self.tasks.set(len(asyncio.all_tasks()))
        return generate_latest(self.registry)


class MediaMetrics:
    """Frames and audio through the sessions' pipelines, and the event loop that carries them."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.loop_busy = Gauge(
            "avatar_web_loop_busy", "Share of the last seconds the event loop thread spent on the CPU", registry=r
        )
        self.frames_generated = Counter(
            "avatar_frames_generated", "Frames produced by the engine", registry=r
        )
        self.frames_played = Counter("avatar_frames_played", "Video frames released by playout", registry=r)
        self.frames_rested = Counter(
            "avatar_interrupt_frames_rested", "Video slots that showed the face at rest instead of a frame of "
            "speech an interrupt dropped", registry=r,
        )
        self.deadline_misses = Counter(
            "avatar_deadline_misses", "Frames dropped late or repeated for lack of a new one", registry=r
        )
        self.first_frame_seconds = Histogram(
            "avatar_first_frame_seconds",
            "Offer received to first video frame played out",
            registry=r,
            buckets=(0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
        )
        self.playout_delay_seconds = Gauge(
            "avatar_playout_delay_seconds", "Playout delay L, mean over sessions", registry=r
        )
        self.mic_seconds = Counter(
            "avatar_mic_audio_seconds", "Inbound microphone audio received", registry=r
        )
        self.recorder_frames_dropped = Counter(
            "avatar_recorder_frames_dropped", "Frames left out of a recording whose encoder fell behind", registry=r
        )


class EngineMetrics:
    """The engine workers' figures, copied in at each scrape."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.sessions = Gauge("avatar_engine_sessions", "Sessions per engine worker", ["worker"], registry=r)
        self.capacity = Gauge(
            "avatar_engine_capacity", "More sessions each engine worker can hold in real time", ["worker"], registry=r
        )
        self.alive = Gauge("avatar_engine_alive", "1 while the engine worker serves", ["worker"], registry=r)
        self.batch_mean = Gauge(
            "avatar_engine_batch_mean", "Mean sessions per batched engine call", ["worker"], registry=r
        )
        self.load = Gauge(
            "avatar_engine_load", "Engine speed now against its start-up calibration (>1: slower)", ["worker"],
            registry=r,
        )
        self.chunk_ms = Gauge(
            "avatar_engine_chunk_ms", "Engine time per chunk and stage, per session", ["worker", "stage"], registry=r
        )
        self.quality_sessions = Gauge(
            "avatar_engine_quality_sessions", "Sessions at each quality level", ["worker", "level"], registry=r
        )
        self.workers_lost = Gauge(
            "avatar_engine_workers_lost", "Engine workers that died or were killed for making no progress",
            registry=r,
        )
        self.restarts = Gauge("avatar_engine_restarts", "Replacement engine workers started", registry=r)

    def update(self, workers: list, lost: int, restarts: int) -> None:
        """Copy the engine workers' latest figures into the gauges (at each scrape)."""
        self.workers_lost.set(lost)
        self.restarts.set(restarts)
        for w in workers:
            label = str(w.index)
            self.sessions.labels(label).set(w.sessions)
            self.capacity.labels(label).set(w.capacity)
            self.alive.labels(label).set(1 if w.alive else 0)
            stats = w.stats
            if stats is None:
                continue
            self.batch_mean.labels(label).set(stats.batch_mean)
            self.load.labels(label).set(float(stats.costs.get("load", 1.0)))
            for stage, ms in stats.chunk_ms.items():
                self.chunk_ms.labels(label, stage).set(ms)
            levels: dict[int, int] = {}
            for level in stats.quality_levels.values():
                levels[level] = levels.get(level, 0) + 1
            for level in range(max(levels, default=0) + 1):
                self.quality_sessions.labels(label, str(level)).set(levels.get(level, 0))
