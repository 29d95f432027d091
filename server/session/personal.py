"""Personal avatars in the web process: the store and the enrolments running into it.

An enrolment runs in a thread (decoding, face mesh, OpenCV: native code that leaves the event
loop free) under a bound (``MAX_ENROLMENTS`` at once; more get 429). Its progress and its
outcome stay readable by name until the same name is enrolled again, so a client polls
``GET /v1/avatars/{name}`` after ``POST /v1/avatars``. A failed enrolment stores nothing; its
one-line reason is the result. The clip is a temporary file, removed when the enrolment ends.
Sessions load a stored avatar by name (``load``) and carry it to the engine like a photo.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from server.base.engine_link import AvatarStore, EnrollError, PhotoAvatar, StoreError, enroll
from server.base.errors import ApiError
from server.base.tasks import TaskSet

log = logging.getLogger(__name__)

MAX_ENROLMENTS = 1  # at once: an enrolment takes most of a core for its length's worth of seconds


@dataclass
class Enrolment:
    """One enrolment's state, as ``GET /v1/avatars/{name}`` shows it while it runs or after it failed."""

    name: str
    status: str = "enrolling"  # enrolling | done | failed
    stage: str = "uploaded"
    progress: float = 0.0
    error: str | None = None
    started: float = field(default_factory=time.monotonic)

    def as_json(self) -> dict:
        body: dict = {"name": self.name, "status": self.status, "stage": self.stage,
                      "progress": round(self.progress, 3)}
        if self.error:
            body["error"] = {"code": "bad_video", "message": self.error}
        return body


def _store_error(exc: StoreError) -> ApiError:
    code = {404: "unknown_avatar", 409: "avatar_exists"}.get(exc.status, "bad_avatar_name")
    return ApiError(exc.status, code, exc.reason)


class PersonalAvatars:
    """The store under ``root`` (the bundled avatars' names refused) and its enrolments."""

    def __init__(self, root: str | Path | None, reserved: Callable[[], list[str]]) -> None:
        self.store = AvatarStore(root)
        self.reserved = reserved  # the bundled avatars' names, known once the engine runs
        self.enrolments: dict[str, Enrolment] = {}
        self._running = 0
        self._tasks = TaskSet("enrol-")

    def names(self) -> list[str]:
        return [row["name"] for row in self.store.list()]

    def check_new(self, name: str) -> None:
        """``ApiError`` unless ``name`` can be enrolled now (valid, free, not enrolling, a slot free)."""
        try:
            self.store.check_name(name)
        except StoreError as exc:
            raise _store_error(exc) from None
        if name in self.reserved():
            raise ApiError(409, "avatar_exists", f"{name!r} is a bundled avatar's name")
        current = self.enrolments.get(name)
        if current is not None and current.status == "enrolling":
            raise ApiError(409, "enrolment_running", f"{name!r} is being enrolled; wait for it to finish")
        if name in self.store:
            raise ApiError(409, "avatar_exists", f"an avatar named {name!r} exists already")
        if self._running >= MAX_ENROLMENTS:
            raise ApiError(429, "enrolment_busy", "another enrolment is running; try again when it has finished")

    def start(self, name: str, clip: Path) -> Enrolment:
        """Enrol ``clip`` (a temporary file this takes over) as ``name`` in the background."""
        self.check_new(name)
        job = Enrolment(name)
        self.enrolments[name] = job
        self._running += 1
        self._tasks.spawn(self._run(job, clip), name)
        return job

    async def _run(self, job: Enrolment, clip: Path) -> None:
        loop = asyncio.get_running_loop()

        def progress(fraction: float, stage: str) -> None:  # from the enrolment's thread
            def update() -> None:
                job.progress, job.stage = fraction, stage

            loop.call_soon_threadsafe(update)

        try:
            avatar, report = await asyncio.to_thread(enroll, clip, progress)
            await asyncio.to_thread(self.store.save, job.name, avatar, report)
            job.status, job.stage, job.progress = "done", "done", 1.0
            log.info("enrolled %r: %d mouths, coverage %.0f%%", job.name, report.entries, 100 * report.coverage)
        except (EnrollError, StoreError) as exc:
            job.status, job.error = "failed", exc.reason
        except Exception as exc:  # a bug must not leave the name "enrolling" for good
            log.exception("enrolment of %r failed", job.name)
            job.status, job.error = "failed", f"enrolment failed ({exc.__class__.__name__})"
        finally:
            self._running -= 1
            clip.unlink(missing_ok=True)

    def describe(self, name: str) -> dict:
        """The stored avatar's listing entry, or the state of its enrolment (running or failed)."""
        if name in self.store:
            return {"status": "ready", **self.store.info(name)}
        job = self.enrolments.get(name)
        if job is None:
            raise ApiError(404, "unknown_avatar", f"no avatar named {name!r}")
        return job.as_json()

    def remove(self, name: str) -> None:
        job = self.enrolments.get(name)
        if job is not None and job.status == "enrolling":
            raise ApiError(409, "enrolment_running", f"{name!r} is being enrolled; wait for it to finish")
        try:
            self.store.remove(name)
        except StoreError as exc:
            raise _store_error(exc) from None
        self.enrolments.pop(name, None)

    async def load(self, name: str) -> PhotoAvatar | None:
        """The stored avatar ``name`` made ready for a session, or None if there is none."""
        if name not in self.store:
            return None
        try:
            return await asyncio.to_thread(self.store.load, name)
        except (StoreError, OSError, ValueError) as exc:
            raise ApiError(500, "avatar_unreadable", f"the stored avatar {name!r} cannot be read") from exc

    async def close(self) -> None:
        self._tasks.cancel()


def temporary_clip() -> Path:
    """A new empty file for an uploaded clip (removed by the enrolment, or by the caller on error)."""
    fd, path = tempfile.mkstemp(prefix="avatar-enrol-", suffix=".video")
    os.close(fd)
    return Path(path)
