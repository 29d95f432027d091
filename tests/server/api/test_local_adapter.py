"""The engine's code the web process runs itself, made of the engine's modules: voice activity with
the model's window, the store and the enrolment raising the server's errors, the MP4 writer and the
Piper voices handed down."""

from __future__ import annotations

import numpy as np
import pytest

from engine.media import piper, vad
from engine.media.mp4 import Mp4Writer
from engine.personal import enroll as enrolment
from server.api import local_adapter
from server.api.local_adapter import AvatarStore, SileroActivity, create_backend, enroll
from server.base.local_engine import EnrollError, StoreError, VadUnavailable


def test_the_bundle_holds_the_engines_makers() -> None:
    made = local_adapter.local_engine()
    assert made.mp4_writer is Mp4Writer and made.piper is piper and made.voice_activity is SileroActivity
    assert local_adapter.MAX_VIDEO_BYTES == enrolment.MAX_BYTES


def test_voice_activity_runs_silero_on_its_windows() -> None:
    model = SileroActivity()
    assert (model.rate, model.window) == (16000, 512)
    p = model(np.zeros(model.window, np.float32))
    assert 0.0 <= p < 0.5  # silence is not speech


def test_a_missing_voice_activity_model_is_the_servers_error(monkeypatch) -> None:
    def missing() -> None:
        raise vad.VadUnavailable("voice activity detection needs the silero-vad package")

    monkeypatch.setattr(vad, "SileroVAD", missing)
    with pytest.raises(VadUnavailable, match="silero-vad"):
        SileroActivity()


def test_the_store_refuses_with_the_servers_errors(tmp_path) -> None:
    store = AvatarStore(tmp_path)
    assert store.root == tmp_path and store.list() == [] and "nobody" not in store
    with pytest.raises(StoreError) as bad:
        store.check_name("../escape")
    assert bad.value.status == 400 and bad.value.reason
    with pytest.raises(StoreError) as missing:
        store.remove("nobody")
    assert missing.value.status == 404


def test_an_unreadable_clip_is_an_enrolment_error_of_the_server(tmp_path) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"not a video")
    with pytest.raises(EnrollError) as caught:
        enroll(clip, None, 10.0)
    assert caught.value.reason and not isinstance(caught.value, enrolment.EnrollError)


def test_the_tts_backends_are_made_with_the_engines_piper_voices() -> None:
    assert create_backend("espeak", 16000).name == "espeak"
    if piper.available() and piper.installed_voices():
        speech = create_backend("piper", 16000)
        assert speech.name == "piper" and speech.default_voice == "joe"
