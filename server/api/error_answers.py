"""Errors as JSON ``{"error": {"code", "message"}}`` with the right status (and ``Retry-After`` on a 503)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.base.errors import ApiError
from server.base.protocol import ErrorResponse


def error(status: int, code: str, message: str, retry_after: float | int | None = None) -> JSONResponse:
    """The JSON answer for an error; a 503 says when to retry (5 s unless told)."""
    body = ErrorResponse.model_validate({"error": {"code": code, "message": message}})
    retry_after = 5 if retry_after is None and status == 503 else retry_after
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def answer_errors(app: FastAPI, engine_error: type[Exception]) -> None:
    """``app`` answers its own errors, the engine's (``engine_error``: busy, 503) and malformed
    requests (400) as JSON."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status, exc.code, exc.message, exc.retry_after)

    @app.exception_handler(engine_error)
    async def _engine_error(_: Request, exc) -> JSONResponse:
        return error(503, exc.code, exc.message, exc.retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors[:3])
        return error(400, "bad_request", detail or "malformed request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, "http_error", str(exc.detail))
