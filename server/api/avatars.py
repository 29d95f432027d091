"""``/v1/avatars``: personal avatars enrolled from a clip of the person, listed and removed.

``POST /v1/avatars?name=NAME`` takes the clip as the raw body (any ``video/*`` or
``application/octet-stream``) or as the ``video`` field of a multipart form, streamed to a
file in the upload folder and counted as it arrives (413 ``MAX_VIDEO_BYTES`` past it, the file
deleted; ``server.api.clip_upload``); the upload holds an enrolment slot from before its body is
read (429 at once when none is free). It answers 202 once the clip is in: the
enrolment runs in the background and ``GET /v1/avatars/{name}`` shows its stage and progress,
then the stored avatar (or the one-line reason it failed), and ``GET /v1/avatars/{name}/face``
its rest frame (the face a session animates). ``GET /v1/avatars`` lists the store,
``DELETE /v1/avatars/{name}`` removes one. With a server token set, every call needs it.
A stored avatar is a session's ``avatar``: ``POST /v1/sessions {"avatar": NAME}``.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse

from server.api.clip_upload import receive_clip
from server.api.limits import check_token, client_of
from server.api.local_adapter import MAX_VIDEO_BYTES
from server.base.errors import ApiError
from server.base.protocol import ErrorResponse
from server.config import AccessSettings
from server.session.personal import PersonalAvatars


def create_router(access: AccessSettings) -> APIRouter:
    router = APIRouter(prefix="/v1/avatars", tags=["avatars"])

    def _personal(request: Request) -> PersonalAvatars:
        check_token(request, access.auth_token, "personal avatars need the server's bearer token")
        return request.app.state.manager.personal

    errors = {code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 413, 415, 429)}

    @router.post("", status_code=202, responses=errors)
    async def enrol(request: Request, name: str = Query(..., max_length=64)) -> JSONResponse:
        personal = _personal(request)
        # The slot is taken before the body: a taken name or no free slot costs no transfer.
        with personal.upload(name, client_of(request, access.auth_token)) as upload:
            await receive_clip(request, upload.path, MAX_VIDEO_BYTES)
            job = personal.start(name, upload)
        return JSONResponse(job.as_json(), status_code=202, headers={"Location": f"/v1/avatars/{name}"})

    @router.get("", responses=errors)
    async def listing(request: Request) -> dict:
        personal = _personal(request)
        running = [j.as_json() for j in personal.enrolments.values() if j.status == "enrolling"]
        return {"avatars": personal.store.list(), "enrolling": running, "store": str(personal.store.root)}

    @router.get("/{name}", responses=errors)
    async def describe(name: str, request: Request) -> dict:
        return _personal(request).describe(name)

    @router.get("/{name}/face", responses=errors, response_class=FileResponse)
    async def face(name: str, request: Request) -> FileResponse:
        """The stored avatar's rest frame (512² PNG): the face its sessions animate."""
        store = _personal(request).store
        if name not in store:
            raise ApiError(404, "unknown_avatar", f"no avatar named {name!r}")
        return FileResponse(store.root / name / "rest.png", media_type="image/png")

    @router.delete("/{name}", status_code=204, responses=errors)
    async def remove(name: str, request: Request) -> Response:
        _personal(request).remove(name)
        return Response(status_code=204)

    return router
