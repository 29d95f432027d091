"""Property-based fuzzing of every HTTP endpoint the app has (taken from its routes, so endpoints
added later are fuzzed too): random methods, paths, headers and bodies — JSON of any shape, the
API's own shapes with wrong values, raw bytes, mutated SDP offers. Each answer is below 500 and
every error is the JSON ``{"error": {"code", "message"}}`` (503 only for a full server, with
Retry-After); afterwards the server is healthy and
holds no session, task or peer."""

from __future__ import annotations

import asyncio
import json
import string

import httpx
import pytest
from fastapi.routing import APIRoute
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st
from sdp_helpers import CHROME_OFFER, mutations
from server_helpers import loopback_only, make_settings, running_server, session_tasks, wait_until

pytestmark = pytest.mark.usefixtures("one_thread")
FUZZ = fuzz(300)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD")
OFFERS = [sdp for _, sdp in mutations(CHROME_OFFER)][::7]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(["avatar", "image", "mode", "quality", "record", "voice", "seed", "sdp", "type",
                               "barge_in", "user_audio", "candidate", "surprise"])
field_values = st.one_of(json_values, st.sampled_from(["offer", "answer", "agent", "mirror", "fast", "ada", "",
                                                       "aGVsbG8=", CHROME_OFFER, "x" * 5000]), st.sampled_from(OFFERS))
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes | None, str | None]:
    kind = draw(st.sampled_from(["none", "json", "shaped", "shaped", "bytes", "sdp", "sdp", "huge"]))
    if kind == "none":
        return None, draw(st.none() | st.just("application/json"))
    if kind == "json":
        return json.dumps(draw(json_values)).encode(), "application/json"
    if kind == "shaped":
        body = draw(st.dictionaries(field_names, field_values, max_size=5))
        return json.dumps(body).encode(), "application/json"
    if kind == "bytes":
        return draw(st.binary(max_size=2048)), draw(st.sampled_from(["application/json", "application/sdp",
                                                                      "text/plain", "multipart/form-data"]))
    if kind == "sdp":
        return draw(st.sampled_from(OFFERS)).encode(), draw(st.sampled_from(["application/sdp",
                                                                              "application/trickle-ice-sdpfrag"]))
    return b"{" + b" " * 5_000_000 + b"}", "application/json"


@st.composite
def requests(draw: st.DrawFn, templates: list[tuple[str, tuple[str, ...]]], live: dict) -> dict:
    path, methods = draw(st.sampled_from(templates))
    method = draw(st.sampled_from(methods * 12 + METHODS))  # mostly a method the route has
    for name in ("session_id", "resource_id"):
        if "{" + name + "}" in path:
            real = live.get("session_id", "s_x")
            value = draw(st.sampled_from([real] * 6 + ["s_nope", "..", "%00", "a" * 300])
                         | st.text(string.ascii_letters + string.digits + "_-.%", min_size=1, max_size=20))
            path = path.replace("{" + name + "}", value)
    if draw(st.booleans()):
        path += "?" + draw(st.text(string.ascii_letters + "=&%?#/", max_size=30))
    body, content_type = draw(bodies())
    headers = {}
    if content_type is not None:
        headers["content-type"] = content_type
    auth = draw(st.sampled_from(["session"] * 4 + ["none", "random", "basic", "text"]))
    if auth == "session" and "token" in live:
        headers["authorization"] = f"Bearer {live['token']}"
    elif auth == "random":
        headers["authorization"] = "Bearer " + draw(header_text)
    elif auth == "basic":
        headers["authorization"] = "Basic dXNlcjpwYXNz"
    elif auth == "text":
        headers["authorization"] = draw(header_text)
    for _ in range(draw(st.integers(0, 2))):
        headers[draw(st.sampled_from(["x-forwarded-for", "origin", "accept", "if-match", "x-junk", "range"]))] = (
            draw(header_text))
    headers = {k: v.strip() for k, v in headers.items()}  # what HTTP allows a client to send at all
    return {"method": method, "url": path, "content": body, "headers": headers}


def assert_clear_answer(request: dict, res: httpx.Response) -> None:
    """Below 500, or the one designed 5xx: 503 "full, retry" with a Retry-After."""
    assert res.status_code < 500 or (res.status_code == 503 and res.headers.get("retry-after")), (
        request["method"], request["url"], res.status_code, res.text[:300])
    if res.status_code >= 400 and request["method"] != "HEAD":
        error = res.json()["error"]
        assert isinstance(error["code"], str) and error["code"], res.text
        assert isinstance(error["message"], str) and error["message"], res.text


# Left to their own tests: personal avatars (an upload starts an enrolment; test_avatars.py,
# test_upload_bounds.py) and WHIP/WHEP (test_whip.py, test_trickle_flood.py).
OWN_TESTS = ("/v1/avatars", "/v1/sessions/{session_id}/whip", "/v1/sessions/{session_id}/whep")


def route_templates(app) -> list[tuple[str, tuple[str, ...]]]:
    """Every HTTP route of ``app``, its routers' included, as (path, methods)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # a FastAPI that flattens included routers into app.routes
        return [(r.path, tuple(sorted(r.methods))) for r in app.routes if isinstance(r, APIRoute)]
    return [(c.path, tuple(sorted(c.methods))) for c in iter_route_contexts(app.routes)
            if isinstance(c.route, APIRoute)]


async def test_every_endpoint_answers_random_requests_with_a_clear_4xx(monkeypatch):
    loopback_only(monkeypatch)
    fuzz_settings = make_settings(max_sessions=3, offer_timeout_s=2.0, connect_timeout_s=2.0,
                                  client_sessions_per_minute=100_000, client_max_unoffered=100)
    async with running_server(fuzz_settings, config="puppet") as srv:
        templates = [t for t in route_templates(srv.app) if not t[0].startswith(OWN_TESTS)]
        assert any("{session_id}" in path for path, _ in templates)
        live: dict = {}
        statuses: dict[int, int] = {}
        loop = asyncio.get_running_loop()

        def refresh_session(client: httpx.Client) -> None:
            if live.get("session_id") not in srv.manager.sessions:
                res = client.post("/v1/sessions", json={"mode": "agent"})
                if res.status_code == 201:
                    live.update(res.json())

        with httpx.Client(base_url=srv.url, timeout=20) as client:

            @FUZZ
            @given(requests(templates, live))
            def run(request: dict) -> None:
                refresh_session(client)
                res = client.request(**request)
                statuses[res.status_code] = statuses.get(res.status_code, 0) + 1
                assert_clear_answer(request, res)

            await asyncio.to_thread(run)
        assert len([s for s in statuses if 400 <= s < 500]) >= 4, statuses  # many kinds of refusal were met
        assert any(200 <= s < 300 for s in statuses), statuses
        assert (await srv.http.get("/healthz")).status_code == 200
        for sid in list(srv.manager.sessions):
            await srv.manager.close(sid, "test_done")
        assert await wait_until(lambda: not srv.manager.sessions and not session_tasks(), 15)
        assert loop.is_running()
        res = await srv.http.post("/v1/sessions", json={})
        assert res.status_code == 201, res.text  # and it still takes a session
