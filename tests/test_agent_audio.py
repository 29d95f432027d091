"""Agent audio end to end (``micro`` engine: these check the audio path and its timing, not faces):
streamed PCM faster and slower than real time, interrupt latency in media time, bad input."""

from __future__ import annotations

import asyncio
import base64
import time

import numpy as np
import pytest
from agent_helpers import PACKET_S, append_message, live_session, tone
from server_helpers import AUDIO_HOLD_S, loopback_only, make_settings, running_server

pytestmark = pytest.mark.usefixtures("one_thread")
SR = 16000


async def test_interrupt_stops_the_voice_within_200_ms_of_media_time(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="micro") as srv, live_session(srv) as live:
        ev = live.events
        pcm = tone(8.0)
        for part in np.array_split(pcm, 4):  # 8 s pushed at once: faster than real time
            await ev.send(append_message(part, SR, "long"))
        await ev.send({"type": "audio.commit"})
        started = await ev.wait("playback.started", "long")
        await asyncio.sleep(1.5)
        t_interrupt = time.monotonic()
        await ev.send({"type": "interrupt"})
        finished = await ev.wait("playback.finished", "long", timeout_s=2)
        t_finished = ev.at("playback.finished", "long")
        await asyncio.sleep(1.5)  # what was generated before the interrupt has played out by now

        session = srv.manager.sessions[live.id]
        _, cut, fed = session.interrupts[-1]
        heard_s = finished["pts"] - started["pts"]
        # The event: interrupted, sent at once, and its pts is the media time playing when it came.
        assert finished["interrupted"] and t_finished - t_interrupt < 0.2
        assert finished["pts"] == pytest.approx(cut / SR, abs=1e-3)
        assert heard_s == pytest.approx(t_interrupt - ev.at("playback.started", "long"), abs=0.3)
        # Media latency at the server: the last packet released with any voice in it ends at most
        # 200 ms of media time after the cut (by design: one 20 ms packet), though up to `fed` had
        # already been handed to the engine (about a second more of tone).
        last_voiced = session.voice_gate.last_voiced_until
        media_latency = (last_voiced - cut) / SR
        assert media_latency <= 0.2, media_latency
        assert (fed - cut) / SR > 0.3  # there really was audio in flight to silence
        # What the client heard: the tone for as long as it played before the cut, and at most
        # 200 ms of media time more (counted in received 20 ms packets, so stalls cannot hide it).
        loud_s = live.media.loud_packets() * PACKET_S
        assert heard_s - 0.3 <= loud_s <= heard_s + 0.2, (loud_s, heard_s)
        late = live.media.loud_packets(since=t_interrupt + AUDIO_HOLD_S + 0.2 + 0.1) * PACKET_S
        assert late <= 0.1, late
        assert not ev.of("error"), ev.of("error")
        print(f"interrupt: voice stopped {media_latency * 1000:.0f} ms of media time after the cut "
              f"({(fed - cut) / SR:.2f} s already fed was silenced); event after "
              f"{(t_finished - t_interrupt) * 1000:.0f} ms; client heard {loud_s:.2f} s of {heard_s:.2f} s")


async def test_streamed_audio_plays_as_it_arrives_slower_than_real_time(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="micro") as srv, live_session(srv) as live:
        ev = live.events
        pcm = tone(2.4, rate=24_000)
        parts = np.array_split(pcm, 8)  # 0.3 s of audio every 0.45 s: 1.5x slower than real time
        t0 = time.monotonic()
        for part in parts:
            await ev.send(append_message(part, 24_000, "slow"))
            await asyncio.sleep(0.45)
        started_at = ev.at("playback.started", "slow")
        assert started_at < time.monotonic() - 0.5  # it started playing while the audio still streamed in
        assert not ev.of("playback.finished", "slow")  # and an open utterance does not finish on a gap
        await ev.send({"type": "audio.commit", "utterance_id": "slow"})
        queued = await ev.wait("utterance.queued", "slow")
        finished = await ev.wait("playback.finished", "slow", timeout_s=10)
        assert queued["duration_s"] == pytest.approx(2.4, abs=0.02)
        assert not finished["interrupted"]
        # Gaps are silence, not reordering: every pushed packet is heard once.
        loud_s = live.media.tone_seconds()
        assert loud_s == pytest.approx(2.4, rel=0.1), loud_s
        print(f"slow stream: first sound {started_at - t0:.2f} s after the first append; heard {loud_s:.2f} s")


async def test_agent_bad_input_gets_errors_and_the_session_keeps_working(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(max_text_chars=200), config="micro") as srv, \
            live_session(srv) as live:
        ev = live.events
        wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(64)
        cases = [
            ({"type": "dance"}, "bad_message"),
            ({"type": "speak", "text": ""}, "bad_message"),
            ({"type": "speak", "text": "  \n "}, "empty_text"),
            ({"type": "speak", "text": "word " * 50}, "text_too_long"),
            ({"type": "audio.append", "sample_rate": 4000, "audio": ""}, "bad_message"),
            ({"type": "audio.append", "sample_rate": 16000, "audio": base64.b64encode(b"\1\2\3").decode()},
             "bad_audio"),
            ({"type": "audio.append", "sample_rate": 16000, "audio": base64.b64encode(wav).decode()}, "bad_audio"),
            ({"type": "audio.commit"}, "empty_commit"),
            ({"type": "speak", "text": "Hello.", "voice": "nonexistent"}, "tts_failed"),
        ]
        for i, (message, code) in enumerate(cases):
            await ev.send(message)
            error = await ev.wait("error", after=i)
            assert error["code"] == code, (message, error)
        await ev.send({"type": "audio.append", "sample_rate": 16000})
        await ev.send(b"OggS" + bytes(100))
        assert (await ev.wait("error", after=len(cases)))["code"] == "bad_audio"
        # Still working: a real utterance plays from start to finish.
        await ev.send({"type": "speak", "text": "Still here.", "utterance_id": "ok"})
        assert not (await ev.wait("playback.finished", "ok"))["interrupted"]
        assert ev.of("playback.started", "ok")
