"""The engine's code the web process runs itself, beside its sessions, as the server's lower layers
see it: the MP4 writer behind recordings, the voice activity model behind barge-in, the Piper
voices and the espeak-ng program behind the TTS, and personal avatars' store and enrolment.

All are ports: :class:`LocalEngine` bundles their makers, built over the engine at the top
(``server.api.local_adapter``) and handed down with the engine's view; the errors they raise are
the server's own, so no module below the API imports the engine to catch them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from server.base.engine_port import PhotoAvatar, PublishedFrame


class Mp4Sink(Protocol):
    """An H.264/AAC MP4 file being written, frame by frame."""

    def write(self, frame: PublishedFrame) -> None: ...

    def close(self) -> None: ...  # finish the file

    def abort(self) -> None: ...  # give the file up


class VoiceActivity(Protocol):
    """Speech probability of consecutive ``window``-sample windows at ``rate``; one per audio stream."""

    rate: int
    window: int

    def __call__(self, window: np.ndarray) -> float: ...


class VadUnavailable(RuntimeError):
    """The voice activity model cannot run here (its package is missing)."""


def no_voice_activity() -> VoiceActivity:
    """The maker where no model was given: voice activity is unavailable."""
    raise VadUnavailable("no voice activity model was given to this session")


class EspeakProgram(Protocol):
    """espeak-ng as a program: the command line that speaks a text as WAV on stdout, and that WAV read."""

    def command(self, text: str, voice: str = ...) -> list[str]: ...

    def read_wav(self, data: bytes) -> tuple[np.ndarray, int]: ...  # (int16 mono samples, sample rate)


class PiperVoices(Protocol):
    """Piper's installed voices, loaded and spoken with."""

    PIPER_INSTALL: str  # how to install Piper and its default voice

    def available(self) -> bool: ...

    def installed_voices(self, model: Path | None = None) -> dict[str, Path]: ...

    def load_voice(self, path: Path, threads: int = 1) -> Any: ...

    def synthesize(self, voice: Any, text: str) -> tuple[np.ndarray, int]: ...  # (float32 mono, its rate)


class StoreError(ValueError):
    """A store request that cannot be met; ``status`` is the HTTP status it maps to."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class EnrollError(ValueError):
    """Footage that cannot make an avatar; ``reason`` is one line for a person."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EnrollTimeout(EnrollError):
    """The enrolment ran past its wall-clock bound: it stopped where it was."""


class EnrollReport(Protocol):
    @property
    def entries(self) -> int: ...  # mouths kept

    @property
    def coverage(self) -> float: ...


class AvatarStore(Protocol):
    """Personal avatars on disk, by name; :class:`StoreError` for a request it cannot meet."""

    @property
    def root(self) -> Path: ...  # the folder each avatar's own folder lies in

    def check_name(self, name: str) -> str: ...

    def __contains__(self, name: object) -> bool: ...

    def save(self, name: str, avatar: PhotoAvatar, report: EnrollReport) -> dict: ...

    def load(self, name: str) -> PhotoAvatar: ...

    def info(self, name: str) -> dict: ...

    def list(self) -> list[dict]: ...

    def remove(self, name: str) -> None: ...


class Enroll(Protocol):
    """The personal avatar of the person in a clip; :class:`EnrollError` says why not
    (:class:`EnrollTimeout` past ``timeout_s``)."""

    def __call__(self, path: Path, progress: Callable[[float, str], None] | None,
                 timeout_s: float | None) -> tuple[PhotoAvatar, EnrollReport]: ...


@dataclass(frozen=True)
class LocalEngine:
    """The makers of what the web process runs of the engine's code."""

    mp4_writer: Callable[[Path, int, int, int, int], Mp4Sink]  # (path, width, height, fps, sample_rate)
    voice_activity: Callable[[], VoiceActivity]  # VadUnavailable if the model cannot run
    piper: PiperVoices
    espeak: EspeakProgram
    avatar_store: Callable[[str | Path | None], AvatarStore]
    enroll: Enroll
