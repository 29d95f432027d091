"""Long-session measurement over WebRTC (``make soak``). ``AVATAR_SOAK_S`` sets the length (default
120 s), ``AVATAR_SOAK_CONFIG`` the engine config (default tiny; ``micro`` isolates the serving layer
from engine speed), ``AVATAR_SOAK_THREADS`` the engine's torch threads (default 2),
``AVATAR_SOAK_QUALITY`` the preset (quality | fast), ``AVATAR_SOAK_SERVER`` where the server runs:
``process`` (default: ``avatar serve`` in its own process, as deployed, so the measuring client
does not share its interpreter) or ``inprocess``.

Reports and checks the serving targets: A/V offset within one frame over the whole session,
deadline misses at steady state, engine state memory flat, time to first frame. Everything
server-side is read from the control socket's ``metrics`` events.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import websockets
from server_helpers import (
    Received,
    SpeechTrack,
    av_offset,
    collect,
    connect_client,
    loopback_only,
    make_settings,
    running_server,
    spawned_server,
    speech_pcm16,
)

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def engine_threads() -> Iterator[None]:
    """The engine on ``AVATAR_SOAK_THREADS`` torch threads (default 2, as ``avatar serve``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("AVATAR_SOAK_THREADS", "2")))
    yield
    torch.set_num_threads(before)
WARMUP_S = 15.0


def server_under_test(config: str, monkeypatch):
    loopback_only(monkeypatch)  # this process's side; a spawned server restricts its own
    if os.environ.get("AVATAR_SOAK_SERVER", "process") == "inprocess":
        return running_server(make_settings(max_sessions=1), config=config)
    return spawned_server(config, threads=int(os.environ.get("AVATAR_SOAK_THREADS", "2")))


def prometheus_value(res, name: str) -> dict[str, float]:
    """``_sum`` and ``_count`` of a histogram from ``GET /metrics``."""
    values = {}
    for line in res.text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f"{name}_{part} "):
                values[part] = float(line.split()[1])
    return values


def last_before(metrics: list[tuple[float, dict]], t: float) -> dict:
    return [m for at, m in metrics if at <= t][-1]


async def test_long_session_keeps_sync_deadlines_and_memory(monkeypatch):
    duration = float(os.environ.get("AVATAR_SOAK_S", "120"))
    config = os.environ.get("AVATAR_SOAK_CONFIG", "tiny")
    options = {"mode": "mirror", "quality": os.environ.get("AVATAR_SOAK_QUALITY", "fast")}
    async with server_under_test(config, monkeypatch) as srv:
        session = (await srv.http.post("/v1/sessions", json=options)).json()
        ws = await websockets.connect(
            f"{srv.ws_url}/v1/sessions/{session['session_id']}/control?token={session['token']}"
        )
        metrics: list[tuple[float, dict]] = []

        async def read_events() -> None:
            async for raw in ws:
                event = json.loads(raw)
                if event["type"] == "metrics":
                    metrics.append((time.monotonic(), event))

        reader = asyncio.create_task(read_events())
        t0 = time.monotonic()
        pc = await connect_client(srv, session, SpeechTrack(speech_pcm16(), loop=True))
        video, audio, stop = Received("video"), Received("audio"), asyncio.Event()
        tasks = [asyncio.create_task(collect(r.track, video if r.track.kind == "video" else audio, stop, False))
                 for r in pc.getReceivers()]
        await asyncio.sleep(duration)
        stop.set()
        first_frame = video.arrival[0] - t0
        step = prometheus_value(await srv.http.get("/metrics"), "avatar_engine_step_seconds")
        warm, end = last_before(metrics, t0 + WARMUP_S), metrics[-1][1]

        windows = np.arange(video.arrival[0], video.arrival[-1] - 5, 30.0)
        offsets = [av_offset(video, audio, (w, w + 30.0)) for w in windows] or [av_offset(video, audio)]
        misses = end["deadline_misses"] - warm["deadline_misses"]
        slots = end["frames_played"] - warm["frames_played"] + misses
        miss_ratio = misses / max(1, slots)
        server_av = max(abs(m["av_offset_ms"]) for t, m in metrics if t - t0 > WARMUP_S)
        nbytes_warm, nbytes_end = warm["engine_state_bytes"], end["engine_state_bytes"]
        growth = (nbytes_end - nbytes_warm) / nbytes_warm
        print(f"\nsoak {duration:.0f} s, {config}, {options['quality']}, server "
              f"{os.environ.get('AVATAR_SOAK_SERVER', 'process')}: first frame {first_frame * 1000:.0f} ms after "
              f"offer; steady-state deadline misses {misses}/{slots} = {100 * miss_ratio:.2f}%; playout delay "
              f"{end['playout_delay_ms']:.0f} ms; client A/V offset per 30 s window (ms) "
              f"{[round(o * 1000, 1) for o in offsets]}; server A/V offset max {server_av:.1f} ms; "
              f"engine state {nbytes_warm} -> {nbytes_end} bytes ({100 * growth:+.2f}%); engine step mean "
              f"{1000 * step['sum'] / max(step['count'], 1):.0f} ms over {step['count']:.0f} chunks")

        await srv.http.delete(f"/v1/sessions/{session['session_id']}",
                              headers={"Authorization": f"Bearer {session['token']}"})
        await pc.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        reader.cancel()

        assert max(abs(o) for o in offsets) <= 1 / 25
        assert server_av <= 40
        # Flat within 2%, give or take the audio the engine holds between chunks (which varies with the
        # chunk phase: up to ~2 s of float32 samples).
        assert nbytes_end - nbytes_warm <= max(0.02 * nbytes_warm, 2 * 16_000 * 4)
        assert miss_ratio <= 0.005
