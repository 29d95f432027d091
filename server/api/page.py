"""The demo page: ``/`` and its files under ``/static`` (an app's and a front's alike)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parents[2] / "web"


def serve_page(app: FastAPI) -> None:
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.include_router(router)
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
