"""``/v1/sessions``: create a session (per-client limits), answer its offer, read its trace, delete it."""

from __future__ import annotations

from aiortc import RTCSessionDescription
from fastapi import APIRouter, Request, Response

from server.api.limits import ClientLimits, bearer, check_token, client_of
from server.api.ops import manager
from server.base.errors import ApiError
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorResponse, SessionCreate, SessionCreated, SessionDescription
from server.config import AccessSettings, InputLimits, NetworkSettings
from server.media.peer import BadOffer

API = "/v1/sessions"


def _errors(*codes: int) -> dict:
    return {code: {"model": ErrorResponse} for code in codes}


def create_router(access: AccessSettings, network: NetworkSettings, limits: InputLimits, clients: ClientLimits,
                  metrics: ServerMetrics) -> APIRouter:
    router = APIRouter(prefix=API, tags=["sessions"])

    @router.post("", status_code=201, response_model=SessionCreated, responses=_errors(401, 503))
    async def create_session(request: Request, body: SessionCreate | None = None) -> SessionCreated:
        check_token(request, access.auth_token, "creating a session needs the server's bearer token")
        m = manager(request)
        rejected = metrics.sessions_rejected.labels("rate_limited").inc
        with clients.admitted(client_of(request, access.auth_token), m.waiting_for_offer, rejected) as created:
            session = await m.create(body or SessionCreate())
            created(session.id)
        return SessionCreated(
            session_id=session.id,
            token=session.token,
            ice_servers=network.ice_servers,
            mode=session.mode,
            avatar=session.avatar,
            drawn=session.drawn,
            fps=session.fps,
            sample_rate=session.sample_rate,
            width=session.width,
            height=session.height,
        )

    @router.post("/{session_id}/offer", response_model=SessionDescription, responses=_errors(400, 401, 404))
    async def offer(session_id: str, body: SessionDescription, request: Request) -> SessionDescription:
        session = manager(request).get(session_id, bearer(request))
        if body.type != "offer":
            raise ApiError(400, "bad_sdp", "expected an SDP of type 'offer'")
        if len(body.sdp.encode()) > limits.max_sdp_bytes:
            raise ApiError(413, "sdp_too_large", f"SDP over {limits.max_sdp_bytes} bytes")
        try:
            answer = await session.accept_offer(RTCSessionDescription(sdp=body.sdp, type="offer"))
        except BadOffer as exc:
            manager(request).close_soon(session_id, "bad_offer")
            raise ApiError(400, "bad_sdp", str(exc)) from exc
        except ApiError:
            raise
        except Exception:
            manager(request).close_soon(session_id, "offer_failed")
            raise
        return SessionDescription(sdp=answer.sdp, type="answer")

    @router.get("/{session_id}/trace", responses=_errors(401, 404))
    async def trace(session_id: str, request: Request) -> dict[str, list]:
        """The session's latency trace: clock-stamped logs of the last half minute (microphone
        blocks, feed blocks, engine frames, video slots released), to split a latency into its terms."""
        return manager(request).get(session_id, bearer(request)).trace.to_json()

    @router.delete("/{session_id}", status_code=204, responses=_errors(401, 404))
    async def delete_session(session_id: str, request: Request) -> Response:
        manager(request).get(session_id, bearer(request))
        await manager(request).close(session_id, "deleted")
        return Response(status_code=204)

    return router
