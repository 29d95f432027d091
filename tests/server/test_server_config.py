"""Settings from defaults, env vars and flags; the bind check."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.base.protocol import IceServer
from server.config import Settings


def test_settings_from_env_and_flags():
    env = {"AVATAR_PORT": "9000", "AVATAR_MAX_SESSIONS": "5", "AVATAR_ICE_SERVERS": "stun:a:1 turn:u:p@b:2"}
    s = Settings.from_env(env, max_sessions=3, host=None)
    assert (s.port, s.max_sessions, s.host) == (9000, 3, "127.0.0.1")
    assert s.ice_servers == [IceServer(urls=["stun:a:1"]), IceServer(urls=["turn:b:2"], username="u",
                                                                       credential="p")]
    with pytest.raises(ValidationError):
        Settings.from_env({"AVATAR_ICE_SERVERS": "http://x"})


def test_non_loopback_bind_needs_an_auth_token():
    Settings(host="127.0.0.1").check_bind()
    Settings(host="::1").check_bind()
    Settings(host="localhost").check_bind()
    with pytest.raises(ValueError, match="auth token"):
        Settings(host="0.0.0.0").check_bind()
    Settings(host="0.0.0.0", auth_token="secret").check_bind()


def test_the_engine_leaves_one_core_to_the_web_process_by_default(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1})
    assert Settings().engine_threads == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(16)))
    assert Settings().engine_threads == 15
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {3})
    assert Settings().engine_threads == 1
    assert Settings.from_env({"AVATAR_ENGINE_THREADS": "4"}).engine_threads == 4
    with pytest.raises(ValidationError):
        Settings(engine_threads=0)
