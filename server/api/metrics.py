"""Prometheus metrics for ``GET /metrics``.

Each app owns its own registry, so several apps (tests) never collide on metric names and
nothing leaks through the module-level default registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ServerMetrics"]


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_active = Gauge("avatar_sessions_active", "Avatar sessions alive now", registry=r)
        self.sessions_created = Counter("avatar_sessions_created", "Sessions created", registry=r)
        self.sessions_rejected = Counter(
            "avatar_sessions_rejected", "Session creations refused", ["reason"], registry=r
        )
        self.sessions_closed = Counter("avatar_sessions_closed", "Sessions closed", ["reason"], registry=r)
        self.frames_generated = Counter(
            "avatar_frames_generated", "Frames produced by the engine", registry=r
        )
        self.frames_played = Counter("avatar_frames_played", "Video frames released by playout", registry=r)
        self.deadline_misses = Counter(
            "avatar_deadline_misses", "Frames dropped late or repeated for lack of a new one", registry=r
        )
        self.chunk_seconds = Histogram(
            "avatar_engine_step_seconds",
            "Engine step compute time (one chunk)",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2),
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
        self.recorder_frames_dropped = Counter(
            "avatar_recorder_frames_dropped", "Frames left out of a recording whose encoder fell behind", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
