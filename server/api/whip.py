"""WHIP (RFC 9725) ingest and WHEP egress: WebRTC's standard HTTP signalling, so that any standard
publisher can drive a session's avatar and any WHEP player can show it.

``POST /v1/sessions/{id}/whip`` takes a publisher's ``application/sdp`` offer: its audio drives the
avatar exactly as the page's microphone does (the publisher is the session's peer). ``POST
/v1/sessions/{id}/whep`` adds a read-only viewer of the avatar's video and voice (several per
session). Both answer ``201`` with the SDP answer, a ``Location`` naming the resource (``PATCH`` it
with trickled candidates, ``DELETE`` it to stop; deleting the WHIP resource ends the session), an
``ETag`` and one ``Link`` per configured ICE server. The bearer token is the session's.
"""

from __future__ import annotations

from aiortc import RTCSessionDescription
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from server.api.limits import bearer
from server.base.errors import ApiError
from server.base.protocol import ErrorResponse, IceServer
from server.config import InputLimits, NetworkSettings
from server.media.peer import BadOffer
from server.media.trickle import TrickleLimit, add_candidates, budget, is_restart, parse_fragment
from server.session.manager import SessionManager
from server.session.session import Session

SDP = "application/sdp"
SDP_FRAGMENT = "application/trickle-ice-sdpfrag"
ENDPOINT = "/v1/sessions/{{session_id}}/{kind}"
RESOURCE = "/v1/sessions/{{session_id}}/{kind}/{{resource_id}}"
KINDS = ("whip", "whep")


def ice_links(servers: list[IceServer]) -> list[str]:
    """RFC 9725 section 4.6: one ``Link`` value per ICE server URL, TURN credentials as parameters."""
    links = []
    for server in servers:
        for url in server.urls:
            link = f'<{url}>; rel="ice-server"'
            if server.username is not None:
                link += f'; username="{server.username}"'
            if server.credential is not None:
                link += f'; credential="{server.credential}"; credential-type="password"'
            links.append(link)
    return links



def _session(request: Request, session_id: str) -> Session:
    manager: SessionManager = request.app.state.manager
    return manager.get(session_id, bearer(request))


def _require_type(request: Request, expected: str) -> None:
    given = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if given != expected:
        raise ApiError(415, "unsupported_media_type", f"expected Content-Type {expected}, got {given or 'none'}")


async def _text_body(request: Request, limits: InputLimits, what: str) -> str:
    body = await request.body()
    if len(body) > limits.max_sdp_bytes:
        raise ApiError(413, "sdp_too_large", f"{what} over {limits.max_sdp_bytes} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_sdp", f"{what} is not UTF-8 text") from None


def _etag(resource_id: str) -> str:
    return f'"{resource_id}"'


def _resource_pc(session: Session, kind: str, resource_id: str):
    """The peer connection behind a WHIP/WHEP resource, or 404."""
    pc = session.ingest_pc(resource_id) if kind == "whip" else session.viewer_pc(resource_id)
    if pc is None:
        raise ApiError(404, "unknown_resource", f"no {kind.upper()} resource {resource_id!r} in this session")
    return pc


def _not_allowed(allow: str):
    async def refuse(request: Request) -> Response:
        body = ErrorResponse.model_validate(
            {"error": {"code": "method_not_allowed", "message": f"{request.method} is not allowed; allowed: {allow}"}}
        )
        return JSONResponse(body.model_dump(), status_code=405, headers={"Allow": allow})

    return refuse


def create_router(limits: InputLimits, network: NetworkSettings) -> APIRouter:
    """The WHIP and WHEP endpoints and resources of every session."""
    router = APIRouter(tags=["whip/whep"])
    for kind in KINDS:
        endpoint, resource = ENDPOINT.format(kind=kind), RESOURCE.format(kind=kind)
        router.add_api_route(endpoint, _offer_handler(kind, limits, network), methods=["POST"], status_code=201,
                             response_class=Response, name=f"{kind}_offer")
        router.add_api_route(resource, _trickle_handler(kind, limits), methods=["PATCH"], status_code=204,
                             response_class=Response, name=f"{kind}_trickle")
        router.add_api_route(resource, _stop_handler(kind), methods=["DELETE"], response_class=Response,
                             name=f"{kind}_stop")
        router.add_api_route(endpoint, _not_allowed("POST"), methods=["GET", "PUT", "PATCH", "DELETE"],
                             include_in_schema=False)
        router.add_api_route(resource, _not_allowed("PATCH, DELETE"), methods=["GET", "PUT", "POST"],
                             include_in_schema=False)
    return router


def _offer_handler(kind: str, limits: InputLimits, network: NetworkSettings):
    async def offer(session_id: str, request: Request) -> Response:
        session = _session(request, session_id)
        _require_type(request, SDP)
        offer = RTCSessionDescription(sdp=await _text_body(request, limits, "SDP offer"), type="offer")
        try:
            if kind == "whip":
                resource_id, answer = await session.accept_ingest(offer)
            else:
                resource_id, answer = await session.add_viewer(offer)
        except BadOffer as exc:
            if kind == "whip":  # the session's one peer is unusable: the session goes, as with /offer
                request.app.state.manager.close_soon(session_id, "bad_offer")
            raise ApiError(400, "bad_sdp", str(exc)) from exc
        location = RESOURCE.format(kind=kind).format(session_id=session_id, resource_id=resource_id)
        response = Response(answer.sdp, status_code=201, media_type=SDP,
                            headers={"Location": location, "ETag": _etag(resource_id)})
        for link in ice_links(network.ice_servers):
            response.headers.append("Link", link)
        return response

    return offer


def _trickle_handler(kind: str, limits: InputLimits):
    async def trickle(session_id: str, resource_id: str, request: Request) -> Response:
        """Trickle ICE (RFC 8840 fragments); an ICE restart is refused with 422."""
        pc = _resource_pc(_session(request, session_id), kind, resource_id)
        _require_type(request, SDP_FRAGMENT)
        match = request.headers.get("if-match")
        if match is not None and match not in ("*", _etag(resource_id)):
            raise ApiError(412, "etag_mismatch", f"If-Match {match} does not name this resource's ETag")
        text = await _text_body(request, limits, "SDP fragment")
        try:
            fragment = parse_fragment(text)
            restart = match == "*" or is_restart(pc, fragment)
            if not restart:
                budget(pc, limits.max_trickle_fragments, limits.max_trickle_candidates).spend(fragment)
                await add_candidates(pc, fragment)
        except TrickleLimit as exc:
            status = 413 if exc.code == "too_many_candidates" else 429
            raise ApiError(status, exc.code, str(exc)) from exc
        except (ValueError, AssertionError, IndexError) as exc:
            raise ApiError(400, "bad_sdp_fragment", str(exc) or "malformed SDP fragment") from exc
        if restart:
            raise ApiError(422, "ice_restart_unsupported", "ICE restarts are not supported; start a new session")
        return Response(status_code=204)

    return trickle


def _stop_handler(kind: str):
    async def stop(session_id: str, resource_id: str, request: Request) -> Response:
        """End a viewer, or the ingest (and with it the session, whose peer it is)."""
        session = _session(request, session_id)
        _resource_pc(session, kind, resource_id)
        if kind == "whip":
            await request.app.state.manager.close(session_id, "ingest_ended")
        else:
            await session.remove_viewer(resource_id)
        return Response(status_code=200)

    return stop
