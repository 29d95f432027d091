"""The client library against a live server (``micro`` engine), the observer socket, and the
examples/agent_echo.py agent."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import websockets
from agent_helpers import LEAD_S, tone, user_wav
from server_helpers import SpeechTrack, loopback_only, make_settings, running_server, session_tasks, wait_until

from server.base.protocol import PlaybackFinished, PlaybackStarted, UtteranceQueued
from server.client import AvatarError, AvatarSession

pytestmark = pytest.mark.usefixtures("one_thread")
SR = 16000


def load_example(name: str):
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def drain(pc) -> list[asyncio.Task]:
    async def read(track):
        with __import__("contextlib").suppress(Exception):
            while True:
                await track.recv()

    return [asyncio.create_task(read(r.track)) for r in pc.getReceivers() if r.track is not None]


async def test_client_round_trip(monkeypatch):
    loopback_only(monkeypatch)
    heard: list[tuple[np.ndarray, int]] = []
    mic, _ = user_wav()
    async with running_server(make_settings(), config="micro") as srv:
        avatar = await AvatarSession.create(srv.url, barge_in=False, on_user_speech=lambda pcm, rate: heard.append(
            (pcm, rate)))
        assert avatar.viewer_url.startswith(f"{srv.url}/#session={avatar.id}&token=")
        seen: list = []

        async def watch():
            async for event in avatar.events():
                seen.append(event)

        watcher = asyncio.create_task(watch())
        pc = await avatar.connect_media(mic=SpeechTrack(mic))
        readers = await drain(pc)
        await avatar.wait_for("session.ready")
        observer = await websockets.connect(
            f"{srv.ws_url}/v1/sessions/{avatar.id}/control?token={avatar.token}&role=observer")

        # say(): queued, then started and finished when played out.
        finished = await avatar.say_and_wait("Hello from the client library.")
        assert isinstance(finished, PlaybackFinished) and not finished.interrupted
        uid = finished.utterance_id
        # push_audio(): float samples at another rate, streamed in pieces, then committed.
        pcm = tone(1.0, rate=24_000).astype(np.float32) / 32768
        for part in np.array_split(pcm, 4):
            tone_id = await avatar.push_audio(part, 24_000)
        assert await avatar.commit() == tone_id
        done = await avatar.wait_for("playback.finished", tone_id)
        assert not done.interrupted
        # interrupt(): a long utterance stops at once.
        long_id = await avatar.push_audio(tone(10.0), SR, utterance_id="long")
        await avatar.commit()
        await avatar.wait_for("playback.started", "long")
        await avatar.interrupt()
        cut = await avatar.wait_for("playback.finished", "long", timeout_s=2)
        assert long_id == "long" and cut.interrupted
        # The user's speech reached the callback as PCM for a recogniser.
        assert await wait_until(lambda: heard, 15)
        (speech, rate), = heard
        assert rate == SR and speech.dtype == np.int16 and 2.0 < speech.size / SR < 6.0
        # Errors come back as events; the session goes on.
        await avatar.say("   ")
        error = await avatar.wait_for("error")
        assert error.code == "empty_text"

        # The event iterator saw everything in order, typed.
        kinds = [(type(e).__name__, getattr(e, "utterance_id", None)) for e in seen]
        for u in (uid, tone_id):
            assert kinds.index(("UtteranceQueued", u)) < kinds.index(("PlaybackStarted", u)) < kinds.index(
                ("PlaybackFinished", u))
        assert any(isinstance(e, UtteranceQueued) and e.utterance_id == uid for e in seen)
        # The observer socket saw the same playback events, and takes no commands.
        await observer.send(json.dumps({"type": "speak", "text": "no"}))
        observed = []
        with __import__("contextlib").suppress(TimeoutError):
            while True:
                observed.append(json.loads(await asyncio.wait_for(observer.recv(), 0.5)))
        assert {"type": "playback.finished", "utterance_id": "long", "pts": cut.pts, "interrupted": True} in observed
        assert any(e["type"] == "error" and e["code"] == "read_only" for e in observed)
        assert any(e["type"] == "user.speech_stopped" for e in observed)

        # Clean close: the session, its tasks and the control socket are gone.
        await avatar.close()
        await avatar.close()
        assert srv.manager.sessions == {}
        assert await wait_until(lambda: not session_tasks(), 5), session_tasks()
        await asyncio.wait_for(watcher, 5)
        with pytest.raises(AvatarError):
            await avatar.say("after close")
        await observer.close()
        for task in readers:
            task.cancel()
        assert any(isinstance(e, PlaybackStarted) for e in seen)
        print(f"user speech at {LEAD_S} s delivered: {speech.size / SR:.2f} s of PCM")


async def test_client_errors_are_raised_for_http_refusals(monkeypatch):
    async with running_server(make_settings(max_sessions=1), config="micro") as srv:
        with pytest.raises(AvatarError) as bad:
            await AvatarSession.create(srv.url, avatar="nobody")
        assert bad.value.code == "bad_avatar"
        async with await AvatarSession.create(srv.url) as first:
            with pytest.raises(AvatarError) as full:
                await AvatarSession.create(srv.url)
            assert full.value.code == "at_capacity" and first.id in srv.manager.sessions
        assert srv.manager.sessions == {}


def test_agent_echo_rules():
    echo = load_example("agent_echo")
    assert echo.respond("Hello there") == "Hello! Nice to meet you."
    assert echo.respond("what time is it?", dt.datetime(2024, 1, 1, 15, 7)) == "It is 3:07 now."
    assert echo.respond("Who are you?").startswith("I am a talking avatar")
    assert echo.respond("Is the sky green?") == "Good question. You asked: Is the sky green?"
    assert echo.respond("  pineapples  ") == "You said: pineapples"
    assert echo.respond("") == "Did you want to say something?"


async def test_agent_echo_answers_through_the_avatar(monkeypatch, capsys):
    loopback_only(monkeypatch)
    echo = load_example("agent_echo")
    async with running_server(make_settings(), config="micro") as srv:
        said = await echo.run(srv.url, ["Hello!", "What is your name?"], headless=True, server_token=None)
        assert len(said) == 2
        assert srv.manager.sessions == {}
    out = capsys.readouterr().out
    assert "Hello! Nice to meet you." in out and "I am a talking avatar" in out
    for uid in said:
        assert f"[avatar speaking {uid}" in out and f"[avatar done {uid}]" in out
