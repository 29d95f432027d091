"""Server building blocks without sockets: feed clock, speech queue, playback tracking, protocol,
settings, audio conversion, TTS."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from pydantic import ValidationError

from server.api.protocol import AudioAppend, PlaybackFinished, PlaybackStarted, Speak, client_message
from server.config import IceServer, Settings
from server.media.audio import Resampler, float_to_pcm16, pcm16_to_float, resample_pcm16
from server.media.microphone import SampleFifo
from server.session.feeder import Feeder
from server.voice import tts
from server.voice.playback import PlaybackTracker
from server.voice.speech import BacklogFull, SpeechQueue, Utterance

SR, FPS = 16_000, 25


def utt(uid: str, n: int, value: float = 0.5) -> Utterance:
    return Utterance(uid, np.full(n, value, np.float32))


# ---- feed clock -------------------------------------------------------------------------------


def make_feeder(mode="agent", holdback=0.0, backlog_s=8.0) -> Feeder:
    return Feeder(SR, SpeechQueue(60 * SR), SampleFifo(SR), holdback, int(backlog_s * SR), mode)


def test_fifo_is_bounded_and_drops_oldest():
    fifo = SampleFifo(100)
    fifo.push(np.arange(80, dtype=np.float32))
    fifo.push(np.arange(80, 120, dtype=np.float32))
    assert len(fifo) == 100 and fifo.dropped == 20
    out = fifo.take(30)
    assert out[0] == 20 and out.size == 30 and len(fifo) == 70
    assert fifo.take(500).size == 70 and len(fifo) == 0


def test_feeder_feeds_real_time_silence_when_idle():
    f = make_feeder()
    f.prefill(7680)
    f.start(now=100.0)
    assert f.due(100.0) == 0
    block = f.tick(100.5, generated_samples=0)
    assert block.start == 7680 and block.samples.size == 8000 and not block.samples.any()
    assert f.tick(100.5, 0).samples.size == 0  # nothing new is due
    assert f.tick(101.0, 0).samples.size == 8000
    assert f.fed == 7680 + 16000


def test_feeder_places_speech_on_the_timeline_and_pads_with_silence():
    f = make_feeder()
    f.start(0.0)
    f.tick(0.1, 0)  # 1600 samples of silence
    f.speech.append(utt("a", 1000))
    block = f.tick(0.2, 0)
    assert block.start == 1600
    assert block.samples[:1000].min() == 0.5 and not block.samples[1000:].any()
    (seg,) = block.segments
    assert (seg.utterance_id, seg.start, seg.end, seg.first, seg.last) == ("a", 0, 1000, True, True)


def test_feeder_mirror_takes_microphone_with_holdback():
    f = make_feeder(mode="mirror", holdback=0.04)
    f.start(0.0)
    f.mic.push(np.full(800, 0.25, np.float32))
    assert f.tick(0.04, 0).samples.size == 0
    block = f.tick(0.1, 0)
    assert block.samples.size == 960 and block.samples[:800].min() == 0.25 and not block.samples[800:].any()


def test_feeder_skips_input_when_engine_is_too_far_behind():
    f = make_feeder(backlog_s=1.0)
    f.start(0.0)
    f.tick(1.5, generated_samples=0)  # 1.5 s fed, nothing generated: over the 1 s guard
    f.speech.append(utt("a", 800))
    block = f.tick(2.0, generated_samples=0)
    assert block.skipped == 8000 and block.samples.size == 0
    assert f.speech.pending_samples == 800  # speech waits; it is not thrown away
    assert f.tick(2.0, generated_samples=24000).samples.size == 0  # the skipped span is not owed later


# ---- speech queue -----------------------------------------------------------------------------


def test_speech_queue_segments_span_utterances():
    q = SpeechQueue(10_000)
    q.append(utt("a", 300))
    q.append(utt("b", 500))
    block, segs = q.take(400)
    assert block.size == 400
    assert [(s.utterance_id, s.start, s.end, s.first, s.last) for s in segs] == [
        ("a", 0, 300, True, True), ("b", 300, 400, True, False)]
    block, segs = q.take(1000)
    assert block.size == 400 and [(s.first, s.last) for s in segs] == [(False, True)]
    assert len(q) == 0


def test_speech_queue_backlog_cap_and_clear():
    q = SpeechQueue(1000)
    q.append(utt("a", 600))
    with pytest.raises(BacklogFull):
        q.append(utt("b", 300), extra_pending=200)
    q.append(utt("c", 400))
    q.take(100)
    cut, unstarted = q.clear()
    assert cut.id == "a" and cut.fed == 100 and [u.id for u in unstarted] == ["c"]


# ---- playback tracking --------------------------------------------------------------------------


def test_playback_events_fire_when_frames_play_not_when_fed():
    t = PlaybackTracker(SR, FPS)  # 640 samples a frame
    t.begin("a", 6400)  # frame 10
    t.end("a", 6400 + 640 * 5)  # frames 10..14
    assert t.on_played(9) == []
    (started,) = t.on_played(10)
    assert isinstance(started, PlaybackStarted) and started.pts == pytest.approx(0.4)
    assert t.on_played(13) == []
    (finished,) = t.on_played(15)  # frame 14 was dropped: the next one still closes it
    assert isinstance(finished, PlaybackFinished) and not finished.interrupted
    assert t.active == 0


def test_playback_cut_ends_where_feeding_stopped():
    t = PlaybackTracker(SR, FPS)
    t.begin("a", 0)
    t.on_played(0)
    t.cut("a", fed_samples=1000)  # frames 0..1
    (finished,) = t.on_played(1)
    assert finished.interrupted and finished.utterance_id == "a"


def test_back_to_back_utterances_close_before_the_next_starts():
    t = PlaybackTracker(SR, FPS)
    t.begin("a", 0)
    t.end("a", 1000)
    t.begin("b", 1000)
    t.end("b", 2000)
    events = t.on_played(1) + t.on_played(3)
    assert [(type(e).__name__, e.utterance_id) for e in events] == [
        ("PlaybackStarted", "a"), ("PlaybackFinished", "a"), ("PlaybackStarted", "b"), ("PlaybackFinished", "b")]


# ---- protocol and settings ----------------------------------------------------------------------


def test_client_messages_validate_by_type():
    msg = client_message.validate_python({"type": "speak", "text": "hi"})
    assert isinstance(msg, Speak)
    pcm = np.arange(4, dtype="<i2").tobytes()
    msg = client_message.validate_python({"type": "audio.append", "sample_rate": 8000,
                                          "audio": base64.b64encode(pcm).decode()})
    assert isinstance(msg, AudioAppend) and msg.pcm() == pcm
    for bad in ({"type": "nope"}, {"type": "speak"}, {"type": "speak", "text": ""},
                {"type": "audio.append", "sample_rate": 100}, {"type": "audio.append", "sample_rate": 16000,
                                                                "audio": "not base64!"},
                {"type": "ping", "extra": 1}, {"type": "speak", "text": "x", "voice": "--help"}):
        with pytest.raises(ValidationError):
            client_message.validate_python(bad)


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


# ---- audio --------------------------------------------------------------------------------------


def test_pcm16_round_trip_and_resampling():
    x = np.sin(np.arange(48_000) * 2 * np.pi * 440 / 48_000).astype(np.float32) * 0.5
    assert np.abs(pcm16_to_float(float_to_pcm16(x)) - x).max() < 1e-4
    y = resample_pcm16(float_to_pcm16(x), 48_000, 16_000)
    assert abs(y.size - 16_000) <= 32 and 0.45 < np.abs(y).max() < 0.55
    r = Resampler(16_000)
    parts = [r.push_pcm16(float_to_pcm16(x[i : i + 960]), 48_000) for i in range(0, 48_000, 960)]
    assert abs(sum(p.size for p in parts) + r.flush().size - 16_000) <= 32


async def test_espeak_tts_gives_speech_at_the_engine_rate():
    pcm = await tts.synthesize("Hello world.", SR)
    assert pcm.dtype == np.float32 and 0.5 < pcm.size / SR < 3 and np.abs(pcm).max() > 0.1
    with pytest.raises(tts.TTSError):
        await tts.synthesize("Hello", SR, voice="nonexistent")


async def test_server_warms_the_engine_up_before_it_serves(caplog: pytest.LogCaptureFixture) -> None:
    """At start-up the app runs one silent session through the default preset's engine (the
    first user's first chunk then runs on warm kernels); ``warm_up: false`` skips it."""
    import logging

    from server_helpers import engine_pipeline, loaded_engine, make_settings

    from engine.pipeline import warm_up
    from server.api.app import create_app

    pipe = engine_pipeline("micro")
    assert warm_up(pipe) >= 2 * pipe.frames_per_chunk
    for enabled in (True, False):
        caplog.clear()
        app = create_app(make_settings(warm_up=enabled), loaded_engine("micro"))
        with caplog.at_level(logging.INFO, logger="server.api.app"):
            async with app.router.lifespan_context(app):
                assert app.state.manager is not None
        warmed = [r.getMessage() for r in caplog.records if "warmed up" in r.getMessage()]
        assert len(warmed) == (1 if enabled else 0), warmed
        if enabled:
            frames = int(warmed[0].split(": ")[1].split()[0])
            assert frames >= 2 * pipe.frames_per_chunk


def test_guidance_setting_reaches_the_engine() -> None:
    from server.cli import FLAGS
    from server.session.engine_link import load_pipeline

    assert ("--guidance", "guidance") in [(flag, field) for flag, field, _ in FLAGS]
    settings = Settings.from_env({"AVATAR_GUIDANCE": "2"}, config="micro")
    assert settings.guidance == 2.0
    assert load_pipeline(settings).config.audio_guidance == 2.0
    assert load_pipeline(Settings(config="micro")).config.audio_guidance == 1.0  # micro's own value
    with pytest.raises(ValidationError):
        Settings(guidance=-1)
