"""Error responses Starlette writes as plain text leave as the API's JSON error body."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from server.api.json_errors import JsonErrors


def app() -> JsonErrors:
    async def plain(_request) -> PlainTextResponse:
        return PlainTextResponse("Malformed range header.", status_code=400)

    async def already_json(_request) -> JSONResponse:
        return JSONResponse({"error": {"code": "mine", "message": "kept"}}, status_code=409)

    async def fine(_request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    routes = [Route("/plain", plain, methods=["GET", "HEAD"]), Route("/json", already_json), Route("/fine", fine)]
    return JsonErrors(Starlette(routes=routes))


async def test_plain_text_errors_become_json_and_the_rest_is_untouched():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app()), base_url="http://t") as client:
        res = await client.get("/plain")
        assert res.status_code == 400 and res.headers["content-type"] == "application/json"
        assert res.json() == {"error": {"code": "http_error", "message": "Malformed range header."}}
        assert int(res.headers["content-length"]) == len(res.content)
        head = await client.head("/plain")
        assert head.status_code == 400 and head.content == b""
        missing = await client.get("/nowhere")  # Starlette's own plain-text 404
        assert missing.json() == {"error": {"code": "http_error", "message": "Not Found"}}
        assert (await client.get("/json")).json()["error"]["code"] == "mine"
        ok = await client.get("/fine")
        assert ok.status_code == 200 and ok.text == "hello"
