"""The default voice comes from wheels: ``avatar serve`` with no espeak-ng on its PATH starts, and its
avatar speaks (Piper's joe voice), heard by a client."""

from __future__ import annotations

import shutil

from agent_helpers import live_session
from server_helpers import loopback_only, spawned_server

from server.config import Settings


def test_piper_is_the_default_backend():
    assert Settings.from_env({}).speech.tts == "piper"
    assert Settings.from_env({"AVATAR_TTS": "espeak"}).speech.tts == "espeak"


async def test_server_without_espeak_starts_and_speaks(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # the server inherits it; its Python is started by path
    monkeypatch.delenv("AVATAR_TTS", raising=False)
    assert shutil.which("espeak-ng") is None
    loopback_only(monkeypatch)
    async with spawned_server(config="puppet", threads=1) as srv, live_session(srv, barge_in=False) as live:
        await live.events.send({"type": "speak", "text": "Hello there. I speak without espeak.",
                                "utterance_id": "hi"})
        queued = await live.events.wait("utterance.queued", "hi", timeout_s=30)
        finished = await live.events.wait("playback.finished", "hi", timeout_s=30)
        assert queued["duration_s"] > 1.0 and not finished["interrupted"]
        assert not live.events.of("error"), live.events.summary()
        since = live.events.at("playback.started", "hi")
        assert live.media.loud_packets(since=since) > 25  # 0.5 s of voice actually heard
