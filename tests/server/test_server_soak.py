"""Long-session measurement over WebRTC (``make soak``). ``AVATAR_SOAK_S`` sets the length (default
120 s), ``AVATAR_SOAK_CONFIG`` the engine config (default tiny; ``micro`` isolates the serving layer
from engine speed), ``AVATAR_SOAK_THREADS`` the engine's torch threads (default as ``avatar serve``),
``AVATAR_SOAK_QUALITY`` the preset (quality | fast), ``AVATAR_SOAK_SESSIONS`` how many concurrent
sessions (default 1), ``AVATAR_SOAK_IMAGE`` a photo to animate (a path; ``astronaut``: scikit-image's
portrait) instead of the default avatar, ``AVATAR_SOAK_SERVER`` where the server runs:
``process`` (default: ``avatar serve`` in its own process, as deployed, so the measuring client
does not share its interpreter) or ``inprocess``.

Traffic: the first session is a mirror session whose microphone loops speech; every other one is
an agent session that speaks 3 s utterances with 2 s of silence between them, every third one
interrupted 1 s in (the hours-long mode, ``AVATAR_SOAK_S=14400 AVATAR_SOAK_SESSIONS=2``; two
``tiny`` sessions need more than this 2-core machine admits, ``AVATAR_SOAK_CONFIG=micro`` measures
the serving layer).

Reports and checks the serving targets: A/V offset within one frame in every 30 s window,
deadline misses at steady state, engine state memory flat, time to first frame; and of the server
process (``/metrics``, from the end of the warm-up to the end): resident memory within 2%, no more
open file descriptors, threads or event-loop tasks. Everything per session is read from the
control socket's ``metrics`` events.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest
import torch
from image_helpers import image_option
from server_helpers import loopback_only, make_settings, running_server, spawned_server
from traffic_helpers import agent_traffic, open_admitted

from server.config import default_engine_threads

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def engine_threads() -> Iterator[None]:
    """The engine on ``AVATAR_SOAK_THREADS`` torch threads (default as ``avatar serve``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(soak_threads())
    yield
    torch.set_num_threads(before)
def soak_threads() -> int:
    return int(os.environ.get("AVATAR_SOAK_THREADS", str(default_engine_threads())))


WARMUP_S = 15.0
PROCESS = ("process_resident_memory_bytes", "process_open_fds", "avatar_server_threads", "avatar_server_tasks")
CPU = "process_cpu_seconds_total"  # the server process's: with its engine in worker processes, the web side's


def server_under_test(config: str, monkeypatch, sessions: int):
    loopback_only(monkeypatch)  # this process's side; a spawned server restricts its own
    if os.environ.get("AVATAR_SOAK_SERVER", "process") == "inprocess":
        return running_server(make_settings(max_sessions=sessions), config=config)
    return spawned_server(config, threads=soak_threads(), max_sessions=sessions)


def soak_image() -> dict:
    """The ``image`` option of the soak's sessions (none: the default avatar)."""
    return image_option(os.environ.get("AVATAR_SOAK_IMAGE"))


async def process_figures(srv) -> dict[str, float]:
    """The server process's memory, descriptors, threads and tasks, from ``/metrics``."""
    text = (await srv.http.get("/metrics")).text
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (*PROCESS, CPU):
            values[name] = float(value)
    values["at"] = time.monotonic()
    return values


async def test_long_session_keeps_sync_deadlines_and_memory(monkeypatch):
    duration = float(os.environ.get("AVATAR_SOAK_S", "120"))
    config = os.environ.get("AVATAR_SOAK_CONFIG", "tiny")
    count = int(os.environ.get("AVATAR_SOAK_SESSIONS", "1"))
    quality = os.environ.get("AVATAR_SOAK_QUALITY", "fast")
    async with server_under_test(config, monkeypatch, count) as srv:
        options = {"quality": quality, **soak_image()}
        sessions = await open_admitted(srv, options, count, WARMUP_S)
        assert sessions, "the server admitted no session"
        stop = asyncio.Event()
        traffic = [asyncio.create_task(agent_traffic(s, stop)) for s in sessions if s.mic is None]
        samples = []  # the server process every 10 s after the warm-up: growth, not a passing task, counts
        t_end = time.monotonic() + duration
        await asyncio.sleep(WARMUP_S)
        while time.monotonic() < t_end:
            samples.append(await process_figures(srv))
            await asyncio.sleep(min(10.0, max(0.0, t_end - time.monotonic())))
        samples.append(await process_figures(srv))
        process_warm = {k: max(s[k] for s in samples[:3]) for k in PROCESS}
        process_end = {k: max(s[k] for s in samples[-3:]) for k in PROCESS}
        web_cores = (samples[-1][CPU] - samples[0][CPU]) / (samples[-1]["at"] - samples[0]["at"])
        stop.set()
        interrupts = sum(await asyncio.gather(*traffic))
        engine = (await srv.http.get("/v1/engine")).json()["workers"]
        for s in sessions:
            s.stop.set()
        results = [s.figures() for s in sessions]
        for s in sessions:
            await s.close()
        chunk_ms = {k: round(v, 1) for w in engine for k, v in w["chunk_ms"].items()}
        print(f"\nsoak {duration:.0f} s, {len(sessions)} of {count} session(s) admitted, {config}, {quality}, server "
              f"{os.environ.get('AVATAR_SOAK_SERVER', 'process')}; engine ms per chunk and session by stage "
              f"{chunk_ms}, batch mean {[w['batch_mean'] for w in engine]}, quality changes "
              f"{[w['quality_changes'] for w in engine]}; {interrupts} interrupts; server process warm -> end "
              f"{ {k: (process_warm[k], process_end[k]) for k in PROCESS} }; server process CPU {web_cores:.2f} "
              f"cores ({web_cores / len(sessions):.2f} per session)")
        for i, r in enumerate(results):
            print(f"  session {i}: first frame {r['first_frame_s'] * 1000:.0f} ms after its offer; steady-state "
                  f"deadline misses {r['misses']}/{r['slots']} = {100 * r['miss_ratio']:.2f}%; playout delay "
                  f"{r['delay_ms']:.0f} ms; client A/V offset per 30 s window (ms) "
                  f"{[round(o * 1000, 1) for o in r['offsets']]}; server A/V offset max {r['server_av_ms']:.1f} ms; "
                  f"engine state {r['nbytes'][0]} -> {r['nbytes'][1]} bytes")
        for r in results:
            assert max(abs(o) for o in r["offsets"]) <= 1 / 25
            assert r["server_av_ms"] <= 40
            # Flat within 2%, give or take the audio the engine holds between chunks (which varies with the
            # chunk phase: up to ~2 s of float32 samples).
            warm, end = r["nbytes"]
            assert end - warm <= max(0.02 * warm, 2 * 16_000 * 4)
            assert r["miss_ratio"] <= 0.005
        rss = "process_resident_memory_bytes"
        assert process_end[rss] <= 1.02 * process_warm[rss], (process_warm, process_end)
        for figure in PROCESS[1:]:
            assert process_end[figure] <= process_warm[figure], (figure, process_warm, process_end)
