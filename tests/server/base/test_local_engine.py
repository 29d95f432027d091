"""The ports of the engine's code the web process runs itself: the server's own errors, the maker
that stands in when no voice activity model is given, and the engine's modules fitting the ports."""

from __future__ import annotations

import dataclasses

import pytest

from engine.media import espeak, piper
from engine.personal import store
from server.base import local_engine
from server.base.local_engine import EnrollError, EnrollTimeout, StoreError, VadUnavailable, no_voice_activity


def test_without_a_model_voice_activity_is_unavailable_with_a_reason() -> None:
    with pytest.raises(VadUnavailable, match="no voice activity model"):
        no_voice_activity()


def test_store_and_enrolment_errors_carry_a_reason_and_a_status() -> None:
    error = StoreError("no avatar named 'x'", 404)
    assert (error.reason, error.status, str(error)) == ("no avatar named 'x'", 404, "no avatar named 'x'")
    assert StoreError("bad name").status == 400
    timeout = EnrollTimeout("the enrolment took too long")
    assert isinstance(timeout, EnrollError) and timeout.reason == "the enrolment took too long"


def test_the_engines_piper_module_and_store_fit_their_ports(tmp_path) -> None:
    voices = {n for n in vars(local_engine.PiperVoices) if not n.startswith("_")} | {"PIPER_INSTALL"}
    assert voices == {"PIPER_INSTALL", "available", "installed_voices", "load_voice", "synthesize"}
    assert all(hasattr(piper, name) for name in voices)
    wanted = {n for n in vars(local_engine.AvatarStore) if not n.startswith("_") or n == "__contains__"}
    assert wanted == {"root", "check_name", "__contains__", "save", "load", "info", "list", "remove"}
    assert all(hasattr(store.AvatarStore(tmp_path), name) for name in wanted)
    program = {n for n in vars(local_engine.EspeakProgram) if not n.startswith("_")}
    assert program == {"command", "read_wav"} and all(hasattr(espeak, name) for name in program)


def test_the_bundle_of_makers_is_a_frozen_value() -> None:
    fields = [f.name for f in dataclasses.fields(local_engine.LocalEngine)]
    assert fields == ["mp4_writer", "voice_activity", "piper", "espeak", "avatar_store", "enroll"]
    assert local_engine.LocalEngine.__dataclass_params__.frozen  # type: ignore[attr-defined]
