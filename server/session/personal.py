"""Personal avatars in the web process: the store and the enrolments running into it.

An upload takes a slot before its body is read (:meth:`PersonalAvatars.upload`): at most
``max_enrolments`` uploads and enrolments at once, ``client_max_uploads`` uploads arriving from
one client, so parallel uploads are refused with 429 at once instead of lying on disk together.
The slot passes to the enrolment, which runs in a thread (decoding, face mesh, OpenCV: native
code that leaves the event loop free) for at most ``enrolment_timeout_s``. Its progress and its
outcome stay readable by name until the same name is enrolled again, so a client polls
``GET /v1/avatars/{name}`` after ``POST /v1/avatars``. A failed enrolment stores nothing; its
one-line reason is the result. The clip is a file in the upload folder, removed when the
request fails or the enrolment ends. Sessions load a stored avatar by name (``load``) and carry
it to the engine like a photo.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from server.base.engine_port import PhotoAvatar
from server.base.errors import ApiError
from server.base.local_engine import AvatarStore, Enroll, EnrollError, EnrollTimeout, StoreError
from server.base.tasks import TaskSet
from server.config import EnrolmentSettings
from server.session.upload_folder import UploadFolder

log = logging.getLogger(__name__)


@dataclass
class Enrolment:
    """One enrolment's state, as ``GET /v1/avatars/{name}`` shows it while it runs or after it failed."""

    name: str
    status: str = "enrolling"  # enrolling | done | failed
    stage: str = "uploaded"
    progress: float = 0.0
    error: str | None = None
    error_code: str = "bad_video"  # or "timeout": the enrolment ran past its bound
    started: float = field(default_factory=time.monotonic)

    def as_json(self) -> dict:
        body: dict = {"name": self.name, "status": self.status, "stage": self.stage,
                      "progress": round(self.progress, 3)}
        if self.error:
            body["error"] = {"code": self.error_code, "message": self.error}
        return body


@dataclass
class Upload:
    """One upload's clip in the upload folder; ``taken`` once an enrolment owns it (and its slot)."""

    path: Path
    taken: bool = False


def _store_error(exc: StoreError) -> ApiError:
    code = {404: "unknown_avatar", 409: "avatar_exists"}.get(exc.status, "bad_avatar_name")
    return ApiError(exc.status, code, exc.reason)


class PersonalAvatars:
    """The ``store`` (the bundled avatars' names refused), its uploads and enrolments (``enroll``)."""

    def __init__(self, store: AvatarStore, enroll: Enroll, reserved: Callable[[], list[str]],
                 limits: EnrolmentSettings | None = None) -> None:
        self.store = store
        self._enroll = enroll
        self.reserved = reserved  # the bundled avatars' names, known once the engine runs
        self.limits = limits or EnrolmentSettings()
        self.uploads = UploadFolder(self.limits.upload_dir)
        self.enrolments: dict[str, Enrolment] = {}
        self._busy = 0  # uploads arriving and enrolments running: each holds a slot
        self._uploading: Counter[str] = Counter()  # client -> its uploads arriving
        self._names: set[str] = set()  # names whose clip is arriving
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
        if name in self._names or (current is not None and current.status == "enrolling"):
            raise ApiError(409, "enrolment_running", f"{name!r} is being enrolled; wait for it to finish")
        if name in self.store:
            raise ApiError(409, "avatar_exists", f"an avatar named {name!r} exists already")
        if self._busy >= self.limits.max_enrolments:
            raise ApiError(429, "enrolment_busy", "another enrolment is running or arriving; try again when it "
                           "has finished")

    @contextlib.contextmanager
    def upload(self, name: str, client: str) -> Iterator[Upload]:
        """Around one upload, before its body is read: ``ApiError`` at once (a taken name, every slot
        held, or ``client`` with ``client_max_uploads`` arriving); else where its clip goes. The block
        hands the upload to :meth:`start` (which takes the slot and the file) or the file is removed."""
        self.check_new(name)
        if self._uploading[client] >= self.limits.client_max_uploads:
            raise ApiError(429, "upload_busy", f"{self._uploading[client]} uploads of this client are arriving "
                           f"(at most {self.limits.client_max_uploads}); wait for one to finish")
        upload = Upload(self.uploads.new_file())
        self._busy += 1
        self._uploading[client] += 1
        self._names.add(name)
        try:
            yield upload
        finally:
            self._names.discard(name)
            self._uploading[client] -= 1
            if self._uploading[client] <= 0:
                del self._uploading[client]
            if not upload.taken:
                self._busy -= 1
                upload.path.unlink(missing_ok=True)

    def start(self, name: str, upload: Upload) -> Enrolment:
        """Enrol the clip of ``upload`` (arrived under :meth:`upload`, whose slot and file this takes
        over) as ``name`` in the background."""
        job = Enrolment(name)
        self.enrolments[name] = job
        upload.taken = True
        self._tasks.spawn(self._run(job, upload.path), name)
        return job

    async def _run(self, job: Enrolment, clip: Path) -> None:
        loop = asyncio.get_running_loop()

        def progress(fraction: float, stage: str) -> None:  # from the enrolment's thread
            def update() -> None:
                job.progress, job.stage = fraction, stage

            loop.call_soon_threadsafe(update)

        try:
            avatar, report = await asyncio.to_thread(self._enroll, clip, progress, self.limits.enrolment_timeout_s)
            await asyncio.to_thread(self.store.save, job.name, avatar, report)
            job.status, job.stage, job.progress = "done", "done", 1.0
            log.info("enrolled %r: %d mouths, coverage %.0f%%", job.name, report.entries, 100 * report.coverage)
        except EnrollTimeout as exc:
            log.warning("enrolment of %r stopped after %.0f s", job.name, self.limits.enrolment_timeout_s)
            job.status, job.error, job.error_code = "failed", exc.reason, "timeout"
        except (EnrollError, StoreError) as exc:
            job.status, job.error = "failed", exc.reason
        except Exception as exc:  # a bug must not leave the name "enrolling" for good
            log.exception("enrolment of %r failed", job.name)
            job.status, job.error = "failed", f"enrolment failed ({exc.__class__.__name__})"
        finally:
            self._busy -= 1
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
        await self._tasks.wait()
        self.uploads.close()
