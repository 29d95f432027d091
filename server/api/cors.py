"""Cross-origin access: pages served from the origins in ``AVATAR_CORS_ORIGINS`` may call the HTTP API,
WHIP and WHEP.

A WHIP/WHEP client on another origin sends its bearer token in ``Authorization`` and an SDP body
(``application/sdp``, a non-simple content type), so every call is preflighted; it needs to read
``Location`` (the resource to PATCH and DELETE), ``Link`` (ICE servers) and ``ETag`` from the answer.
No origin is allowed unless configured.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

METHODS = ["GET", "POST", "PATCH", "DELETE", "OPTIONS"]
REQUEST_HEADERS = ["Authorization", "Content-Type", "If-Match"]
EXPOSED_HEADERS = ["Location", "Link", "ETag", "Retry-After"]
PREFLIGHT_MAX_AGE_S = 600


def allow_origins(app: FastAPI, origins: list[str]) -> None:
    """Answer preflights and tag responses for ``origins``; nothing at all when there are none."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=METHODS,
        allow_headers=REQUEST_HEADERS,
        expose_headers=EXPOSED_HEADERS,
        max_age=PREFLIGHT_MAX_AGE_S,
    )
