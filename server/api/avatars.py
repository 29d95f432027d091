"""``/v1/avatars``: personal avatars enrolled from a clip of the person, listed and removed.

``POST /v1/avatars?name=NAME`` takes the clip as the raw body (any ``video/*`` or
``application/octet-stream``) or as the ``video`` field of a multipart form, streamed to a
temporary file under ``MAX_VIDEO_BYTES`` (413 past it), and answers 202 at once: the
enrolment runs in the background and ``GET /v1/avatars/{name}`` shows its stage and progress,
then the stored avatar (or the one-line reason it failed). ``GET /v1/avatars`` lists the
store, ``DELETE /v1/avatars/{name}`` removes one. With a server token set, every call needs it.
A stored avatar is a session's ``avatar``: ``POST /v1/sessions {"avatar": NAME}``.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from server.api.limits import bearer
from server.base.engine_link import MAX_VIDEO_BYTES
from server.base.errors import ApiError
from server.base.protocol import ErrorResponse
from server.session.personal import PersonalAvatars, temporary_clip

CHUNK = 1 << 20


def _personal(request: Request) -> PersonalAvatars:
    token = request.app.state.settings.auth_token
    if token is not None and bearer(request) != token:
        raise ApiError(401, "bad_token", "personal avatars need the server's bearer token")
    return request.app.state.manager.personal


async def _receive(request: Request) -> object:
    """The uploaded clip in a temporary file (the caller owns it)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    path = temporary_clip()
    try:
        written = 0
        with path.open("wb") as out:
            if kind == "multipart/form-data":
                form = await request.form(max_files=1, max_fields=4)
                upload = form.get("video")
                if upload is None or isinstance(upload, str):
                    raise ApiError(400, "bad_video", "the multipart form needs the clip in a field named 'video'")
                while chunk := await upload.read(CHUNK):
                    written += len(chunk)
                    if written > MAX_VIDEO_BYTES:
                        raise ApiError(413, "video_too_large", f"clip over {MAX_VIDEO_BYTES} bytes")
                    out.write(chunk)
            elif kind.startswith("video/") or kind == "application/octet-stream":
                async for chunk in request.stream():
                    written += len(chunk)
                    if written > MAX_VIDEO_BYTES:
                        raise ApiError(413, "video_too_large", f"clip over {MAX_VIDEO_BYTES} bytes")
                    out.write(chunk)
            else:
                raise ApiError(415, "bad_video", "send the clip as video/* (raw body) or multipart/form-data")
        if written == 0:
            raise ApiError(400, "bad_video", "the clip is empty")
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def create_router() -> APIRouter:
    router = APIRouter(prefix="/v1/avatars", tags=["avatars"])
    errors = {code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 413, 415, 429)}

    @router.post("", status_code=202, responses=errors)
    async def enrol(request: Request, name: str = Query(..., max_length=64)) -> JSONResponse:
        personal = _personal(request)
        personal.check_new(name)  # before the upload: a taken name or a busy server costs no transfer
        clip = await _receive(request)
        try:
            job = personal.start(name, clip)
        except BaseException:
            clip.unlink(missing_ok=True)
            raise
        return JSONResponse(job.as_json(), status_code=202, headers={"Location": f"/v1/avatars/{name}"})

    @router.get("", responses=errors)
    async def listing(request: Request) -> dict:
        personal = _personal(request)
        running = [j.as_json() for j in personal.enrolments.values() if j.status == "enrolling"]
        return {"avatars": personal.store.list(), "enrolling": running, "store": str(personal.store.root)}

    @router.get("/{name}", responses=errors)
    async def describe(name: str, request: Request) -> dict:
        return _personal(request).describe(name)

    @router.delete("/{name}", status_code=204, responses=errors)
    async def remove(name: str, request: Request) -> Response:
        _personal(request).remove(name)
        return Response(status_code=204)

    return router
