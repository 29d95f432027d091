"""What a client chooses a session from: ``/v1/info`` (avatars, presets, modes, the picture),
the bundled portraits, a photograph checked as a session would take it."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from server.api.limits import check_token
from server.api.ops import manager
from server.base.errors import ApiError
from server.base.protocol import ErrorResponse
from server.config import AccessSettings, InputLimits, SessionSettings

API = "/v1"


def page_avatar(session: SessionSettings, engine) -> str:
    """The face the demo page starts on: the settings' where the engine offers it."""
    offered = engine.avatars + [p.name for p in engine.portraits]
    if session.page_avatar in offered:
        return session.page_avatar
    return session.default_avatar or engine.default_avatar


def create_router(session: SessionSettings, access: AccessSettings, limits: InputLimits, ice_server_count: int,
                  jpeg: Callable) -> APIRouter:
    """``jpeg`` encodes a framed photo's picture."""
    router = APIRouter(tags=["sessions"])

    @router.get(f"{API}/info")
    async def info(request: Request) -> dict:
        engine = manager(request).engine
        base = engine.info
        return {
            "avatars": engine.avatars,
            "avatar_urls": {name: f"{API}/drawn-avatars/{name}" for name in engine.avatars},
            "portraits": [{"name": p.name, "label": p.label, "shows": p.shows, "licence": p.licence,
                           "attribution": p.attribution, "url": f"{API}/portraits/{p.name}"}
                          for p in engine.portraits],
            "default_avatar": session.default_avatar or engine.default_avatar,
            "page_avatar": page_avatar(session, engine),
            "personal_avatars": manager(request).personal.names(),
            "reference_images": base.accepts_images,
            "drawn": session.drawn and base.accepts_images,  # what a session gets unless it asks
            "max_image_bytes": limits.max_image_bytes,
            "presets": list(base.presets),
            "default_preset": manager(request).default_preset,
            "modes": ["mirror", "agent"],
            "ice_server_count": ice_server_count,  # how many, never the credentials
            "default_mode": session.default_mode,
            "fps": base.fps,
            "sample_rate": base.sample_rate,
            "width": base.frame_size[1],
            "height": base.frame_size[0],
            "auth_required": access.auth_token is not None,
        }

    @router.get(f"{API}/drawn-avatars/{{name}}", response_class=Response)
    async def drawn_avatar(request: Request, name: str) -> Response:
        """A bundled drawn avatar's face, 128 px (the page's picker shows it)."""
        picture = manager(request).engine.avatar_picture(name)
        if picture is None:
            raise ApiError(404, "unknown_avatar", f"no bundled avatar {name!r}")
        return Response(picture, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    @router.get(f"{API}/portraits/{{name}}", response_class=FileResponse)
    async def portrait(request: Request, name: str) -> FileResponse:
        """A bundled portrait's JPEG (the page's picker shows it)."""
        for p in manager(request).engine.portraits:
            if p.name == name:
                return FileResponse(p.path, media_type="image/jpeg")
        raise ApiError(404, "unknown_portrait", f"no bundled portrait {name!r}")

    @router.post(f"{API}/photos/framing", response_class=Response,
                 responses={code: {"model": ErrorResponse} for code in (400, 401, 413)})
    async def photo_framing(request: Request) -> Response:
        """A photograph (raw PNG/JPEG/WebP/GIF body) checked as ``image`` in a new session would be:
        the 512² JPEG a session of it starts from (its face framed), or the reason it is refused."""
        check_token(request, access.auth_token, "checking a photo needs the server's bearer token")
        photo = await manager(request).images.photo(await request.body())
        return Response(jpeg(photo.image), media_type="image/jpeg")

    return router
