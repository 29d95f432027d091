"""Agent audio end to end (``micro`` engine: these check the audio path and its timing, not faces):
streamed PCM faster and slower than real time, interrupt latency in media time, bad input."""

from __future__ import annotations

import asyncio
import base64
import time

import numpy as np
import pytest
from agent_helpers import PACKET_S, append_message, live_session, tone
from server_helpers import AUDIO_HOLD_S, loopback_only, make_settings, running_server, wait_until

from server.media.playout import AudioOut
from server.voice.mute import MutedAudio, VoiceGate
from server.voice.playback import PlaybackTracker
from server.voice.speech import SpeechQueue

SR = 16000


def test_open_utterance_plays_as_it_arrives_and_keeps_its_place():
    q = SpeechQueue(10 * SR, 64)
    a = q.open("a")
    b = q.open("b")
    q.extend(b, np.full(100, 0.2, np.float32))
    assert q.take(50)[0].size == 0  # "a" has nothing yet: "b" must not jump ahead
    q.extend(a, np.full(300, 0.5, np.float32))
    block, segs = q.take(400)
    assert block.size == 300 and block.max() == 0.5  # "a" runs dry: the rest of the block is the caller's silence
    assert [(s.utterance_id, s.first, s.last) for s in segs] == [("a", True, False)]
    q.close(a)  # closed after everything was fed: an empty segment reports its end
    block, segs = q.take(400)
    assert [(s.utterance_id, s.start, s.end, s.first, s.last) for s in segs] == [
        ("a", 0, 0, False, True), ("b", 0, 100, True, False)]
    assert not q.close(q.open("empty")) and len(q) == 1  # an utterance that never got audio disappears


def test_tracker_interrupt_ends_playing_and_unheard_utterances_at_the_cut():
    t = PlaybackTracker(SR, 25)
    t.begin("a", 0)
    t.fed("a", 16000)
    t.on_played(0)
    t.begin("b", 16000)
    t.fed("b", 20000)
    events = t.interrupt(cut_sample=8000)
    assert [(e.type, e.utterance_id, e.pts, e.interrupted) for e in events] == [
        ("playback.finished", "a", 0.5, True), ("playback.finished", "b", None, True)]
    assert t.active == 0 and t.on_played(100) == []


async def test_voice_gate_silences_the_muted_media_range_with_a_short_fade():
    gate = VoiceGate(SR)
    gate.mute(1000, 2000)
    loud = np.full(320, 10_000, np.int16)

    class Source:
        def __init__(self):
            self.start = 640

        async def next_audio(self):
            out = AudioOut(index=0, pts=0, packet=0, media_sample=self.start, pcm=loud, sample_rate=SR,
                           inserted=False, due=0.0)
            self.start += 320
            return out

    muted = MutedAudio(Source(), gate)
    first = (await muted.next_audio()).pcm  # samples 640..960: before the cut
    second = (await muted.next_audio()).pcm  # 960..1280: the cut at 1000, then a 5 ms fade
    assert np.array_equal(first, loud)
    assert np.array_equal(second[:40], loud[:40]) and second[40] == 10_000 and second[40 + 80:].max() == 0
    assert np.all(np.diff(second[40:121].astype(int)) <= 0)
    for _ in range(3):
        await muted.next_audio()  # 1280..2240: silent up to 2000, loud again after (new speech)
    assert gate.released_until == 2240 and gate.last_voiced_until == 2240
    assert gate.apply(1900, loud[:200]).tolist() == [0] * 100 + [10_000] * 100


@pytest.mark.usefixtures("one_thread")

async def test_interrupt_stops_the_voice_within_200_ms_of_media_time(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="micro") as srv, live_session(srv) as live:
        ev = live.events
        pcm = tone(8.0)
        for part in np.array_split(pcm, 4):  # 8 s pushed at once: faster than real time
            await ev.send(append_message(part, SR, "long"))
        await ev.send({"type": "audio.commit"})
        started = await ev.wait("playback.started", "long")
        session = srv.manager.sessions[live.id]
        gate = session.inbound.voice.gate
        assert await wait_until(lambda: gate.released_until >= (started["pts"] + 1.5) * SR, 10)  # 1.5 s heard
        t_interrupt = time.monotonic()
        await ev.send({"type": "interrupt"})
        finished = await ev.wait("playback.finished", "long", timeout_s=2)
        t_finished = ev.at("playback.finished", "long")
        _, cut, fed = session.inbound.voice.interrupts[-1]
        # What was generated before the interrupt (up to `fed`) has played out, and the client got it.
        assert await wait_until(lambda: gate.released_until >= fed + 0.2 * SR, 10)
        t_released = time.monotonic()
        received = live.media.audio
        assert await wait_until(lambda: received and received[-1][0] > t_released + AUDIO_HOLD_S + 0.1, 10)
        heard_s = finished["pts"] - started["pts"]
        # The event: interrupted, sent at once, and its pts is the media time playing when it came.
        assert finished["interrupted"] and t_finished - t_interrupt < 0.2
        assert finished["pts"] == pytest.approx(cut / SR, abs=1e-3)
        assert heard_s == pytest.approx(t_interrupt - ev.at("playback.started", "long"), abs=0.3)
        # Media latency at the server: the last packet released with any voice in it ends at most
        # 200 ms of media time after the cut (by design: one 20 ms packet), though up to `fed` had
        # already been handed to the engine (about a second more of tone).
        last_voiced = session.inbound.voice.gate.last_voiced_until
        media_latency = (last_voiced - cut) / SR
        assert media_latency <= 0.2, media_latency
        assert (fed - cut) / SR > 0.3  # there really was audio in flight to silence
        # Nor were its pictures shown: every frame of the cut audio went out as the face at rest.
        assert session.outbound.resting.replaced >= (fed - cut) // (SR // session.fps) - 1
        metrics = (await srv.http.get("/metrics")).text
        assert f"avatar_interrupt_frames_rested_total {float(session.outbound.resting.replaced)}" in metrics
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


@pytest.mark.usefixtures("one_thread")
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


@pytest.mark.usefixtures("one_thread")
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
