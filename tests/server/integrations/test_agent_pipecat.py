"""The pipecat integration, driven with pipecat's own frames and test runner: TTS audio frames become
a streamed avatar utterance, interruptions interrupt the avatar, everything else passes through."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
from agent_helpers import tone
from pipecat.frames.frames import (
    InterruptionFrame,
    TextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.tests.utils import SleepFrame, run_test
from server_helpers import loopback_only, make_settings, running_server

from server.client import AvatarSession
from server.integrations.pipecat import AvatarOutput

RATE = 24_000


def tts_frames(seconds: float, context_id: str, channels: int = 1) -> list:
    """A TTS response as pipecat sends it: started, 20 ms audio frames, stopped."""
    pcm = tone(seconds, rate=RATE)
    if channels == 2:
        pcm = np.repeat(pcm, 2)
    step = RATE // 50 * channels
    audio = [TTSAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=RATE, num_channels=channels,
                              context_id=context_id) for i in range(0, pcm.size, step)]
    return [TTSStartedFrame(context_id=context_id), *audio, TTSStoppedFrame(context_id=context_id)]


class Recorder:
    """Stands in for an AvatarSession: records what the processor asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def push_audio(self, pcm, sample_rate, utterance_id=None):
        self.calls.append(("push", utterance_id, sample_rate, np.asarray(pcm).copy()))
        return utterance_id

    async def commit(self):
        self.calls.append(("commit",))
        return None

    async def interrupt(self):
        self.calls.append(("interrupt",))


async def test_processor_forwards_tts_audio_and_interruptions():
    sink = Recorder()
    # System frames overtake queued ones in pipecat: the sleep lets the response through first.
    frames = [*tts_frames(0.1, "a"), TextFrame(text="hello"), *tts_frames(0.04, "b", channels=2),
              SleepFrame(sleep=0.2), InterruptionFrame()]
    down, _ = await run_test(
        AvatarOutput(sink),
        frames_to_send=frames,
        expected_down_frames=[TTSStartedFrame, TTSStoppedFrame, TextFrame, TTSStartedFrame, TTSStoppedFrame,
                              InterruptionFrame],
    )
    kinds = [c[0] for c in sink.calls]
    assert kinds == ["push"] * 5 + ["commit"] + ["push"] * 2 + ["commit", "interrupt"]
    pushed_a = np.concatenate([c[3] for c in sink.calls if c[0] == "push" and c[1] == "tts_a"])
    assert np.array_equal(pushed_a, tone(0.1, rate=RATE))  # the audio itself, in order, nothing lost
    stereo = [c for c in sink.calls if c[0] == "push" and c[1] == "tts_b"]
    assert all(c[2] == RATE and c[3].size == RATE // 50 for c in stereo)  # down-mixed to mono
    # With pass_audio the TTS audio also continues down the pipeline.
    down, _ = await run_test(AvatarOutput(Recorder(), pass_audio=True), frames_to_send=tts_frames(0.04, "c"))
    assert sum(isinstance(f, TTSAudioRawFrame) for f in down) == 2


@pytest.mark.usefixtures("one_thread")
async def test_processor_drives_a_live_avatar(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="micro") as srv:
        async with await AvatarSession.create(srv.url) as avatar:
            pc = await avatar.connect_media()

            async def read(track):
                with contextlib.suppress(Exception):
                    while True:
                        await track.recv()

            readers = [asyncio.create_task(read(r.track)) for r in pc.getReceivers() if r.track is not None]
            await avatar.wait_for("session.ready")
            queued = asyncio.ensure_future(avatar.wait_for("utterance.queued", "tts_one"))
            finished = asyncio.ensure_future(avatar.wait_for("playback.finished", "tts_one"))
            await run_test(AvatarOutput(avatar), frames_to_send=tts_frames(1.0, "one"))
            queued = await queued
            assert queued.duration_s == pytest.approx(1.0, abs=0.02)
            assert not (await finished).interrupted

            # A long answer, cut short by the user: an InterruptionFrame stops the avatar at once.
            started = asyncio.ensure_future(avatar.wait_for("playback.started", "tts_two"))
            cut = asyncio.ensure_future(avatar.wait_for("playback.finished", "tts_two"))
            frames = tts_frames(6.0, "two")
            await run_test(AvatarOutput(avatar), frames_to_send=[*frames[:-1], SleepFrame(sleep=2.5),
                                                                InterruptionFrame()])
            await started
            result = await asyncio.wait_for(cut, 2)
            assert result.interrupted and result.pts - (await started).pts < 2.5
            for task in readers:
                task.cancel()
