"""The whole one-process server as ``avatar serve`` runs it: the app with its TTS backend."""

from __future__ import annotations

from fastapi import FastAPI

from server.api.app import create_app
from server.api.engine_adapter import sample_rate_of
from server.api.local_adapter import create_backend
from server.config import Settings
from server.voice import tts


class CannotServe(Exception):
    """What stops the server from starting, in one line."""


def serving_app(settings: Settings) -> FastAPI:
    """The app ``settings`` describe; ``CannotServe`` if its TTS backend cannot run here."""
    try:
        voice = settings.speech
        speech = create_backend(voice.tts, sample_rate_of(settings.engine.config), voice.piper_model)
    except KeyError as exc:
        raise CannotServe(exc.args[0]) from None
    except tts.TTSUnavailable as exc:
        raise CannotServe(f"TTS backend {settings.speech.tts!r}: {exc}") from None
    return create_app(settings, speech=speech)
