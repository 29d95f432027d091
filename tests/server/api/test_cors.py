"""CORS: pages of the origins in ``AVATAR_CORS_ORIGINS`` may call the API, WHIP and WHEP (preflight,
bearer tokens, ``Location``/``Link``/``ETag`` readable); other origins, and every origin by default, get
no CORS headers at all."""

from __future__ import annotations

from server_helpers import make_settings, running_server

from server.config import Settings

PAGE = "http://127.0.0.1:5173"


def preflight(method: str, origin: str = PAGE, headers: str = "authorization, content-type") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


def test_origins_come_from_a_comma_separated_variable():
    settings = Settings.from_env({"AVATAR_CORS_ORIGINS": f"{PAGE}, https://app.example.com,"})
    assert settings.access.cors_origins == [PAGE, "https://app.example.com"]
    assert Settings.from_env({}).access.cors_origins == []


async def test_allowed_origin_gets_preflight_and_exposed_headers():
    async with running_server(make_settings(cors_origins=[PAGE]), config="puppet") as srv:
        for path, method in [("/v1/sessions", "POST"), ("/v1/sessions/s_1/whip", "POST"),
                             ("/v1/sessions/s_1/whep/r1", "PATCH"), ("/v1/sessions/s_1/whep/r1", "DELETE")]:
            res = await srv.http.options(path, headers=preflight(method))
            assert res.status_code == 200, (path, res.text)
            assert res.headers["access-control-allow-origin"] == PAGE
            assert method in res.headers["access-control-allow-methods"]
            allowed = res.headers["access-control-allow-headers"].lower()
            assert "authorization" in allowed and "content-type" in allowed
        res = await srv.http.post("/v1/sessions", json={"mode": "agent"}, headers={"Origin": PAGE})
        assert res.status_code == 201 and res.headers["access-control-allow-origin"] == PAGE
        exposed = {h.strip().lower() for h in res.headers["access-control-expose-headers"].split(",")}
        assert {"location", "link", "etag"} <= exposed
        # Errors carry the headers too, so a page can read why it was refused.
        res = await srv.http.post("/v1/sessions/s_1/whip", content="v=0",
                                  headers={"Origin": PAGE, "Content-Type": "application/sdp"})
        assert res.status_code == 404 and res.headers["access-control-allow-origin"] == PAGE

        other = await srv.http.options("/v1/sessions", headers=preflight("POST", "http://evil.example"))
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        res = await srv.http.get("/v1/info", headers={"Origin": "http://evil.example"})
        assert res.status_code == 200 and "access-control-allow-origin" not in res.headers


async def test_no_origin_is_allowed_by_default():
    async with running_server(make_settings(), config="puppet") as srv:
        res = await srv.http.options("/v1/sessions", headers=preflight("POST"))
        assert res.status_code == 405 and "access-control-allow-origin" not in res.headers
        res = await srv.http.get("/v1/info", headers={"Origin": PAGE})
        assert res.status_code == 200 and "access-control-allow-origin" not in res.headers
