"""One utterance's failure is that utterance's alone: text a TTS backend fails on (a NUL reaching it
past the message boundary) becomes a ``tts_failed`` event naming the utterance, and the next
utterance is spoken. A session's background task that dies is logged with the session and
reported to its client, never silently gone."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from server_helpers import admitted_session, make_settings, running_server, wait_until
from websockets.sync.client import connect

from server.api.local_adapter import create_backend
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, UtteranceQueued, control_subprotocols
from server.base.tasks import TaskSet
from server.voice.intake import SpeechIntake
from server.voice.speech import SpeechQueue

SR = 16000


@pytest.mark.parametrize("backend", ["piper", "espeak"])
async def test_a_synthesis_that_fails_fails_its_utterance_and_the_voice_speaks_on(backend):
    events: list = []
    intake = SpeechIntake(SpeechQueue(60 * SR, 64), SR, 2000, None, events.append, ServerMetrics(),
                          create_backend(backend, SR))
    worker = asyncio.create_task(intake.run())
    try:
        intake.speak("a\u0000b", "broken", None)
        intake.speak("Hello there.", "fine", None)
        assert await wait_until(lambda: any(isinstance(e, UtteranceQueued) for e in events), 20)
        assert not worker.done()
        errors = [e for e in events if isinstance(e, ErrorEvent)]
        assert [(e.code, e.utterance_id) for e in errors] == [("tts_failed", "broken")]
        assert [e.utterance_id for e in events if isinstance(e, UtteranceQueued)] == ["fine"]
    finally:
        worker.cancel()


async def test_a_task_that_dies_is_handed_over_and_a_cancelled_one_is_not():
    failed: list[tuple[str, str]] = []
    tasks = TaskSet("s:", lambda task, exc: failed.append((task.get_name(), repr(exc))))

    async def dies() -> None:
        raise ValueError("embedded null character")

    tasks.spawn(dies(), "voice")
    cancelled = tasks.spawn(asyncio.sleep(60), "idle")
    cancelled.cancel()
    await tasks.wait()
    assert failed == [("s:voice", "ValueError('embedded null character')")]
    assert len(tasks) == 0


@pytest.mark.usefixtures("one_thread")
async def test_a_session_task_that_dies_is_logged_with_the_session_and_reported(caplog):
    async with running_server(make_settings(max_sessions=1)) as srv:
        created = await admitted_session(srv, {"mode": "agent"})
        session = srv.manager.sessions[created["session_id"]]

        async def dies() -> None:
            raise RuntimeError("lost its way")

        def first_error() -> dict:
            with connect(f"{srv.ws_url}/v1/sessions/{session.id}/control", open_timeout=10,
                         subprotocols=control_subprotocols(created["token"])) as ws:
                while (event := json.loads(ws.recv(timeout=10)))["type"] != "error":
                    pass
                return event

        with caplog.at_level(logging.ERROR, logger="server.session.session"):
            session.tasks.spawn(dies(), "probe")
            assert await wait_until(lambda: session.id in caplog.text, 5)
            error = await asyncio.to_thread(first_error)
        assert error["code"] == "internal_error" and "probe" in error["message"] and "RuntimeError" in error["message"]
        assert "lost its way" in caplog.text
