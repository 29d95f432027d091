"""Settings from defaults, env vars and flags; the bind check."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.base.protocol import IceServer
from server.cli import FLAGS, invalid_settings, main
from server.config import FIELDS, GROUP_OF, SETTING_GROUPS, NetworkSettings, Settings


def test_settings_from_env_and_flags():
    env = {"AVATAR_PORT": "9000", "AVATAR_MAX_SESSIONS": "5", "AVATAR_ICE_SERVERS": "stun:a:1 turn:u:p@b:2"}
    s = Settings.from_env(env, max_sessions=3, host=None)
    assert (s.network.port, s.engine.max_sessions, s.network.host) == (9000, 3, "127.0.0.1")
    assert s.network.ice_servers == [IceServer(urls=["stun:a:1"]), IceServer(urls=["turn:b:2"], username="u",
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
    assert Settings().engine.engine_threads == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(16)))
    assert Settings().engine.engine_threads == 15
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {3})
    assert Settings().engine.engine_threads == 1
    assert Settings.from_env({"AVATAR_ENGINE_THREADS": "4"}).engine.engine_threads == 4
    with pytest.raises(ValidationError):
        Settings(engine_threads=0)


def test_settings_are_small_frozen_groups_each_field_in_one():
    seen: dict[str, str] = {}
    for name, group in SETTING_GROUPS.items():
        assert group.__doc__ and len(group.model_fields) <= 15, group.__name__
        assert group.model_config["frozen"], group.__name__
        for field in group.model_fields:
            assert field not in seen, f"{field} in {seen.get(field)} and {name}"
            seen[field] = name
    assert seen == GROUP_OF and list(Settings.model_fields) == list(SETTING_GROUPS)
    s = Settings(port=0, vad=False, engine="inprocess")
    assert (s.network.port, s.speech.vad, s.engine.engine) == (0, False, "inprocess")
    assert Settings(network=NetworkSettings(port=5)).network.port == 5
    assert not hasattr(s, "port")  # read from its group, never from the whole
    with pytest.raises(ValidationError):
        s.network.port = 1  # frozen
    with pytest.raises(ValidationError, match="no_such_setting"):
        Settings(no_such_setting=1)


def test_each_env_var_lands_in_its_group_field_and_only_given_ones_are_kept():
    s = Settings.from_env({"AVATAR_WEB_LOOP_BUDGET": "0.5", "AVATAR_MAX_TEXT_CHARS": "100", "AVATAR_VOICE": "en",
                           "AVATAR_ENGINE": "inprocess", "AVATAR_HOST": ""}, port=0)
    assert (s.node.web_loop_budget, s.limits.max_text_chars, s.speech.voice, s.engine.engine) == (0.5, 100, "en",
                                                                                                 "inprocess")
    assert s.network.host == "127.0.0.1"  # empty: unset
    assert s.given() == {"port": 0, "engine": "inprocess", "voice": "en", "max_text_chars": 100,
                         "web_loop_budget": 0.5}
    moved = s.replace(port=9, engine="node")
    assert (moved.network.port, moved.engine.engine, moved.limits.max_text_chars) == (9, "node", 100)


def test_a_bad_value_names_its_variable_and_flag(capsys, monkeypatch):
    with pytest.raises(ValidationError) as bad:
        Settings.from_env({"AVATAR_PORT": "eighty", "AVATAR_VAD_THRESHOLD": "2"})
    message = invalid_settings(bad.value)
    assert "AVATAR_PORT (--port)='eighty'" in message and "valid integer" in message
    assert "AVATAR_VAD_THRESHOLD='2'" in message and "less than 1" in message
    monkeypatch.setenv("AVATAR_MAX_SESSIONS", "-1")
    assert main(["serve"]) == 2
    assert "AVATAR_MAX_SESSIONS (--max-sessions)='-1'" in capsys.readouterr().err


def test_every_field_of_every_group_has_its_env_var_and_every_flag_a_field():
    env = {"AVATAR_CORS_ORIGINS": "https://a.example, https://b.example", "AVATAR_VAD_THRESHOLD": "0.6",
           "AVATAR_PLAYOUT_DELAY_S": "0.4", "AVATAR_MAX_VIEWERS": "2", "AVATAR_PEER_TIMEOUT_S": "3",
           "AVATAR_FEED_TICK_S": "0.01", "AVATAR_ICE_PORTS": "40000-40009", "AVATAR_DRAWN": "false"}
    s = Settings.from_env(env)
    assert s.access.cors_origins == ["https://a.example", "https://b.example"]
    assert (s.speech.vad_threshold, s.jitter.playout_delay_s, s.limits.max_viewers, s.timing.peer_timeout_s) == (
        0.6, 0.4, 2, 3.0)
    assert (s.feed.feed_tick_s, s.network.ice_ports, s.session.drawn) == (0.01, (40000, 40009), False)
    assert s.jitter.playout(25, 16_000).initial_delay == 0.4
    with pytest.raises(ValidationError):
        Settings.from_env({"AVATAR_VAD_THRESHOLD": "1.5"})
    assert {field for _, field, _ in FLAGS} <= set(FIELDS)
