"""The server on engine worker processes: a session streams through a subprocess worker, a
killed worker costs only its own sessions (``engine_lost``), a replacement comes up, and
admission follows the engine's measured capacity."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import pytest
from agent_helpers import append_message, live_session, tone
from server_helpers import loopback_only, make_settings, running_server, wait_until

pytestmark = pytest.mark.usefixtures("one_thread")


REPLACEMENT_S = 30.0


def subprocess_settings(**overrides):
    return make_settings(config="puppet", engine="subprocess", max_sessions=None, **overrides)


def frames_since(live, t0: float) -> int:
    return sum(1 for t, _, _ in live.media.video if t >= t0)


async def engine_view(srv) -> list[dict]:
    return (await srv.http.get("/v1/engine")).json()["workers"]


async def test_a_session_streams_through_a_subprocess_worker(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(subprocess_settings(), inprocess=False) as srv:
        workers = await engine_view(srv)
        assert len(workers) == 1 and workers[0]["alive"] and workers[0]["pid"] != os.getpid()
        assert workers[0]["capacity"] > 0
        by_render = workers[0]["real_time_by_render"]
        assert list(by_render) == ["drawn"] and by_render["drawn"] >= 1, "the puppet draws every frame"
        assert (await srv.http.get("/v1/engine")).json()["real_time_by_render"] == by_render
        async with live_session(srv) as live:
            sr = live.session["sample_rate"]
            assert await wait_until(lambda: len(live.media.video) >= 25, 20)
            await live.events.send(append_message(tone(1.5, sr), sr, "beep"))
            await live.events.send({"type": "audio.commit"})
            started = await live.events.wait("playback.started", "beep")
            finished = await live.events.wait("playback.finished", "beep", timeout_s=20)
            assert finished["pts"] - started["pts"] == pytest.approx(1.5, abs=0.1)
            t_started = live.events.at("playback.started", "beep")
            assert await wait_until(lambda: live.media.loud_packets(since=t_started) >= 60, 5)
            assert live.media.loud_packets(since=t_started) <= 85, "1.5 s of tone in 20 ms packets, once"
            t0 = time.monotonic()
            await asyncio.sleep(2.0)  # real-time pacing: frames keep coming at 25 fps
            assert 40 <= frames_since(live, t0) <= 60
            view = (await engine_view(srv))[0]
            assert view["sessions"] == 1 and view["session_ids"] == [live.id]
            assert await wait_until(lambda: live.id in srv.manager.engine.workers()[0].stats.quality_levels, 2)
            metrics = (await srv.http.get("/metrics")).text
            assert 'avatar_engine_sessions{worker="0"} 1.0' in metrics
            load = float(re.search(r'avatar_engine_load\{worker="0"\} ([0-9.e+-]+)', metrics).group(1))
            assert 0.2 < load < 20, "the worker's live speed against its calibration"
            assert view["load"] == pytest.approx(load, rel=0.5)


async def test_a_killed_worker_costs_only_its_own_sessions(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(subprocess_settings(engine_workers=2), inprocess=False) as srv:
        async with live_session(srv) as first, live_session(srv) as second:
            workers = await engine_view(srv)
            home = {sid: w["index"] for w in workers for sid in w["session_ids"]}
            assert home[first.id] != home[second.id], "idle workers share the sessions out"
            assert await wait_until(lambda: len(first.media.video) > 25 and len(second.media.video) > 25, 20)
            victim = next(w for w in workers if w["index"] == home[first.id])
            t_kill = time.monotonic()
            os.kill(victim["pid"], signal.SIGKILL)
            error = await first.events.wait("error", timeout_s=5)
            lost_s = first.events.at("error") - t_kill
            assert error["code"] == "engine_lost" and lost_s < 2.0
            assert await wait_until(lambda: first.id not in srv.manager.sessions, 5)
            t0 = time.monotonic()
            await asyncio.sleep(2.0)
            assert frames_since(second, t0) >= 40, "the other worker's session streams on"
            assert second.id in srv.manager.sessions and (await srv.http.get("/healthz")).json()["sessions"] == 1

            # A replacement loads and calibrates while the survivor's session keeps both cores busy:
            # on a loaded 2-core machine that takes up to about twice its idle 6 s.
            fresh = await asyncio.wait_for(srv.manager.engine.client.replaced.get(), REPLACEMENT_S)
            replaced_s = time.monotonic() - t_kill
            views = await engine_view(srv)
            assert all(w["alive"] for w in views) and victim["pid"] not in {w["pid"] for w in views}
            assert fresh.index == victim["index"]
            async with live_session(srv) as third:
                assert await wait_until(lambda: len(third.media.video) >= 1, 15)
                streams_s = time.monotonic() - t_kill
                assert streams_s < REPLACEMENT_S and await wait_until(lambda: len(third.media.video) >= 25, 15)
            print(f"kill -9: engine_lost after {lost_s * 1000:.0f} ms, replacement up after {replaced_s:.1f} s, "
                  f"a new session's first frame {streams_s:.1f} s after the kill")
            assert 'avatar_engine_workers_lost 1.0' in (await srv.http.get("/metrics")).text


async def test_a_worker_over_two_ranks_serves_a_session(monkeypatch):
    """``--sequence-parallel 2``: the server's one worker runs the engine over two ranks (gloo on
    this CPU) and a session streams through it."""
    from pathlib import Path

    loopback_only(monkeypatch)
    settings = make_settings(config="micro", engine="subprocess", max_sessions=None, sequence_parallel=2)
    async with running_server(settings, inprocess=False) as srv:
        (worker,) = await engine_view(srv)
        assert worker["alive"], worker
        ranks = [p for p in Path("/proc").iterdir() if p.name.isdigit() and
                 (p / "stat").exists() and (p / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(worker["pid"])]
        assert ranks, "the worker started its second rank"
        async with live_session(srv) as live:
            assert await wait_until(lambda: len(live.media.video) >= 25, 30)
            pts = [p for _, p, _ in live.media.video[:25]]
            assert pts == sorted(pts) and len(set(pts)) == 25
