"""The engine's code the web process runs itself (``server.base.local_engine``), made of the
engine's modules: the MP4 writer, Silero voice activity, the Piper voices, personal avatars'
store and enrolment. Their errors become the server's own here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from engine.media import espeak, piper, vad
from engine.media.mp4 import Mp4Writer
from engine.personal import enroll as enrolment
from engine.personal import store
from engine.photo.avatar import PhotoAvatar
from server.base import local_engine as port
from server.base.local_engine import LocalEngine
from server.voice import tts

MAX_VIDEO_BYTES = enrolment.MAX_BYTES  # the largest clip an enrolment takes


class SileroActivity:
    """Silero VAD on one stream (``server.base.local_engine.VoiceActivity``)."""

    rate = vad.VAD_RATE
    window = vad.WINDOW

    def __init__(self) -> None:
        try:
            self._model = vad.SileroVAD()
        except vad.VadUnavailable as exc:
            raise port.VadUnavailable(str(exc)) from None

    def __call__(self, window: np.ndarray) -> float:
        return self._model(window)


@contextlib.contextmanager
def store_errors() -> Iterator[None]:
    """The store's and the enrolment's errors raised as the server's."""
    try:
        yield
    except store.StoreError as exc:
        raise port.StoreError(exc.reason, exc.status) from None
    except enrolment.EnrollTimeout as exc:
        raise port.EnrollTimeout(exc.reason) from None
    except enrolment.EnrollError as exc:
        raise port.EnrollError(exc.reason) from None


class AvatarStore:
    """The personal avatar store under ``root`` (``server.base.local_engine.AvatarStore``)."""

    def __init__(self, root: str | Path | None) -> None:
        self._store = store.AvatarStore(root)

    @property
    def root(self) -> Path:
        return self._store.root

    def check_name(self, name: str) -> str:
        with store_errors():
            return self._store.check_name(name)

    def __contains__(self, name: object) -> bool:
        return name in self._store

    def save(self, name: str, avatar: PhotoAvatar, report: enrolment.EnrollReport) -> dict:
        with store_errors():
            return self._store.save(name, avatar, report)

    def load(self, name: str) -> PhotoAvatar:
        with store_errors():
            return self._store.load(name)

    def info(self, name: str) -> dict:
        with store_errors():
            return self._store.info(name)

    def list(self) -> list[dict]:
        return self._store.list()

    def remove(self, name: str) -> None:
        with store_errors():
            self._store.remove(name)


def enroll(path: Path, progress: Callable[[float, str], None] | None,
           timeout_s: float | None) -> tuple[PhotoAvatar, enrolment.EnrollReport]:
    """The personal avatar of the person in the clip at ``path``, with the server's errors."""
    with store_errors():
        return enrolment.enroll(path, progress, timeout_s)


def local_engine() -> LocalEngine:
    return LocalEngine(mp4_writer=Mp4Writer, voice_activity=SileroActivity, piper=piper, espeak=espeak,
                       avatar_store=AvatarStore, enroll=enroll)


def create_backend(name: tts.Backend, sample_rate: int, piper_model: Path | None = None) -> tts.TTSBackend:
    """The configured TTS backend, Piper's voices and the espeak-ng program from the engine
    (``server.voice.tts.create_backend``)."""
    return tts.create_backend(name, sample_rate, piper_model, piper, espeak)
