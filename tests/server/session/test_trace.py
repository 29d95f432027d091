"""The latency trace of a live agent session: the tone pushed shows up, in order and stamped on
one clock, where it was fed, where the engine's frames carrying it reached the server, and where
those frames left for the track; the endpoint wants the session's token."""

from __future__ import annotations

import time

import numpy as np
from agent_helpers import append_message, live_session, tone
from server_helpers import loopback_only, make_settings, running_server, wait_until

from server.session.trace import LatencyTrace

SR = 16000


def test_each_log_is_bounded() -> None:
    trace = LatencyTrace(keep=10)
    for i in range(50):
        trace.heard(float(i), np.full(320, 0.1 * (i % 2), np.float32))
    assert len(trace.mic) == 10 and trace.mic[-1] == (49.0, 320, np.float32(0.1).item())


async def test_trace_follows_a_tone_from_feed_to_screen(monkeypatch) -> None:
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="micro") as srv, live_session(srv) as live:
        session = srv.manager.sessions[live.id]
        auth = {"Authorization": f"Bearer {live.session['token']}"}
        assert await wait_until(lambda: len(session.trace.shown) > 10, 20)
        back = session.inbound.feeder.rewind.back
        pushed = time.monotonic()
        await live.events.send(append_message(tone(1.0), SR, "t"))
        await live.events.send({"type": "audio.commit"})
        await live.events.wait("playback.finished", "t", timeout_s=20)
        trace = (await srv.http.get(f"/v1/sessions/{live.id}/trace", headers=auth)).json()
        assert (await srv.http.get(f"/v1/sessions/{live.id}/trace")).status_code == 401

    fed = trace["fed"]
    for (_, a, n, peak), (_, b, _, _) in zip(fed, fed[1:], strict=False):
        # each block follows the last, or (the tone, queued whole) goes back over silence fed not long before
        assert b == a + n or (a + n - back <= b < a + n and peak == 0.0), "feed blocks tile the timeline"
    loud_fed = [(t, start) for t, start, _, p in fed if p > 0.3]
    assert loud_fed and loud_fed[0][0] >= pushed
    t_fed, first_loud = loud_fed[0]
    spf = SR // 25
    loud_frames = [(t, i) for t, i, p in trace["generated"] if p > 0.3]
    t_gen, first_frame = loud_frames[0]
    assert first_frame == first_loud // spf or first_frame == first_loud // spf + 1
    assert t_gen > t_fed, "the engine's frame of the tone came after the tone was fed"
    shows = [t for t, _, index in trace["shown"] if index == first_frame]
    assert shows and shows[0] >= t_gen
    slots = [slot for _, slot, _ in trace["shown"]]
    assert slots == sorted(slots) and len(set(slots)) == len(slots)
    print(f"trace: fed -> engine frame {1000 * (t_gen - t_fed):.0f} ms, -> released {1000 * (shows[0] - t_gen):.0f} ms")
