"""Per-client session limits through the API: 429 rate_limited with Retry-After for too many
creations a minute or too many sessions waiting for their offer; X-Forwarded-For counts only
when the server is told a proxy sets it."""

from __future__ import annotations

import pytest
from server_helpers import make_settings, running_server

pytestmark = pytest.mark.usefixtures("one_thread")


def refused(res, words: str) -> int:
    assert res.status_code == 429, res.text
    error = res.json()["error"]
    assert error["code"] == "rate_limited" and words in error["message"]
    return int(res.headers["retry-after"])


async def delete(srv, session: dict) -> None:
    res = await srv.http.delete(f"/v1/sessions/{session['session_id']}",
                                headers={"Authorization": f"Bearer {session['token']}"})
    assert res.status_code == 204


async def test_a_loop_is_refused_with_retry_after_and_a_spoofed_forwarded_for_does_not_help():
    limits = make_settings(max_sessions=8, client_sessions_per_minute=3, client_max_unoffered=2)
    async with running_server(limits, config="puppet") as srv:
        first = (await srv.http.post("/v1/sessions", json={})).json()
        second = (await srv.http.post("/v1/sessions", json={})).json()
        wait = refused(await srv.http.post("/v1/sessions", json={}), "waiting for their offer")
        assert 1 <= wait <= 10  # the oldest is reaped at the 10 s offer timeout
        spoofed = await srv.http.post("/v1/sessions", json={}, headers={"X-Forwarded-For": "203.0.113.7"})
        refused(spoofed, "waiting for their offer")
        await delete(srv, first)
        third = await srv.http.post("/v1/sessions", json={})
        assert third.status_code == 201  # a slot of its own freed: the third creation of the minute
        await delete(srv, second)
        wait = refused(await srv.http.post("/v1/sessions", json={}), "3 a minute")
        assert 50 <= wait <= 60
        assert (await srv.http.get("/healthz")).json()["sessions"] == 1
        metrics = (await srv.http.get("/metrics")).text
        assert 'avatar_sessions_rejected_total{reason="rate_limited"} 3.0' in metrics


async def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client():
    limits = make_settings(max_sessions=8, client_sessions_per_minute=1, proxy_headers=True)
    async with running_server(limits, config="puppet") as srv:
        for address in ("203.0.113.7", "203.0.113.8"):
            res = await srv.http.post("/v1/sessions", json={}, headers={"X-Forwarded-For": address})
            assert res.status_code == 201, res.text
        refused(await srv.http.post("/v1/sessions", json={}, headers={"X-Forwarded-For": "203.0.113.7"}), "a minute")


async def test_a_web_process_whose_event_loop_is_full_refuses_sessions_the_engine_has_room_for():
    async with running_server(make_settings(max_sessions=8, web_loop_budget=0.001), config="puppet") as srv:
        first = await srv.http.post("/v1/sessions", json={})
        assert first.status_code == 201, first.text  # an empty process always takes one
        full = await srv.http.post("/v1/sessions", json={})
        assert full.status_code == 503 and full.headers["retry-after"] == "5", full.text
        error = full.json()["error"]
        assert error["code"] == "at_capacity" and "event loop" in error["message"]
        assert srv.manager.engine.capacity() > 0  # the engine had room
        metrics = (await srv.http.get("/metrics")).text
        assert 'avatar_sessions_rejected_total{reason="web_saturated"} 1.0' in metrics
        assert "avatar_web_loop_busy " in metrics
    default = make_settings(max_sessions=8, web_loop_budget=0.7)
    async with running_server(default, config="puppet") as srv:
        for _ in range(2):
            assert (await srv.http.post("/v1/sessions", json={})).status_code == 201
