"""Uploads as an attacker sends them: bodies with no declared length (chunked), raw or as a
multipart form, far over the cap, to the enrolment route and to every other; uploads in parallel;
a client that leaves mid-upload. Each is stopped by what has arrived, not by what the client
declared: 413 soon after the cap with the disk it took given back, 429 before a second body is
read, nothing left in the upload folder."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from personal_helpers import write_long_blank
from server_helpers import make_settings, running_server, spawned_server, wait_until

import server.api.avatars as avatars_api

pytestmark = pytest.mark.usefixtures("one_thread")
CAP = 1 << 20
CHUNK = b"\0" * (256 * 1024)
BOUNDARY = "b0undary41"


def disk_bytes(*folders: Path) -> int:
    return sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())


class Upload:
    """One ``POST /v1/avatars`` on its own connection, its body sent chunk by chunk (chunked framing)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.sent = 0

    async def send(self, data: bytes) -> None:
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self.writer.drain()
        self.sent += len(data)

    async def finish(self) -> tuple[int, dict]:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()
        return await self.response()

    async def response(self) -> tuple[int, dict]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split()[1])
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
            b"content-length:"))
        return status, json.loads(await self.reader.readexactly(length))


@asynccontextmanager
async def upload(url: str, name: str, content_type: str, path: str | None = None) -> AsyncIterator[Upload]:
    """A chunked POST to ``path`` (default: enrolling ``name``)."""
    where = urlsplit(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(f"POST {path or '/v1/avatars?name=' + name} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                 f"Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    try:
        yield Upload(reader, writer)
    finally:
        writer.close()


async def flood(up: Upload, total: int, folders: tuple[Path, ...]) -> tuple[int, tuple[int, dict]]:
    """Send up to ``total`` bytes until the server answers or drops the connection: the peak disk
    ``folders`` held meanwhile (measured after every chunk) and the answer."""
    answer = asyncio.ensure_future(up.response())
    peak = 0
    try:
        while up.sent < total and not answer.done():
            await up.send(CHUNK)
            peak = max(peak, disk_bytes(*folders))
    except (ConnectionError, OSError):
        pass
    return peak, await answer


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """The upload folder and the system temporary folder (where a form parser would spool), both here."""
    uploads, spool = tmp_path / "uploads", tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    monkeypatch.setattr(avatars_api, "MAX_VIDEO_BYTES", CAP)
    return uploads, spool


@pytest.mark.parametrize("content_type", ["video/mp4", f"multipart/form-data; boundary={BOUNDARY}"])
async def test_an_undeclared_body_over_the_cap_is_stopped_as_it_arrives(content_type, folders, tmp_path):
    settings = make_settings(avatar_store=str(tmp_path / "store"), upload_dir=folders[0])
    async with running_server(settings, config="puppet") as srv, upload(srv.url, "big", content_type) as up:
        if content_type.startswith("multipart"):
            await up.send(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="video"; filename="a.mp4"\r\n'
                          f"Content-Type: video/mp4\r\n\r\n".encode())
        peak, (status, body) = await flood(up, 64 * CAP, folders)
        assert (status, body["error"]["code"]) == (413, "video_too_large"), body
        assert up.sent < 16 * CAP, f"the server read {up.sent} bytes of a body capped at {CAP}"
        assert peak <= CAP + len(CHUNK), f"{peak} bytes on disk at the peak"
        assert await wait_until(lambda: disk_bytes(*folders) == 0, 5)
        assert srv.manager.personal.uploads.files() == []
        retry = await srv.http.post("/v1/avatars", params={"name": "big"}, content=b"x" * 100,
                                    headers={"Content-Type": "video/mp4"})
        assert retry.status_code == 202, retry.text  # the slot was given back


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/nope/offer"])
async def test_an_undeclared_body_to_any_route_is_stopped_at_its_limit(path, tmp_path):
    settings = make_settings(max_image_bytes=64 * 1024)
    limits = settings.limits
    limit = limits.max_image_bytes * 4 // 3 + 4096 if path == "/v1/sessions" else limits.max_sdp_bytes + 4096
    async with running_server(settings, config="puppet") as srv, upload(srv.url, "", "application/json", path) as up:
        peak, (status, body) = await flood(up, 64 * CAP, ())
        assert (status, body["error"]["code"]) == (413, "body_too_large"), body
        # What the kernel's socket buffers take before the 413 reaches the client grows on a loaded machine.
        assert up.sent < limit + 8 * CAP, f"the server read {up.sent} bytes of a body limited to {limit}"
        assert (await srv.http.get("/healthz")).status_code == 200


async def test_parallel_uploads_are_refused_before_their_bodies_are_read(folders, tmp_path):
    one = make_settings(avatar_store=str(tmp_path / "store"), upload_dir=folders[0])
    async with running_server(one, config="puppet") as srv, upload(srv.url, "first", "video/mp4") as first:
        await first.send(CHUNK)
        assert await wait_until(lambda: srv.manager.personal.uploads.disk_bytes() >= len(CHUNK), 5)
        second = await srv.http.post("/v1/avatars", params={"name": "second"}, content=CHUNK * 3,
                                     headers={"Content-Type": "video/mp4"})
        assert second.status_code == 429 and second.json()["error"]["code"] == "enrolment_busy"
        assert disk_bytes(*folders) == len(CHUNK)  # the refused body never reached the disk
        status, body = await first.finish()
        assert status == 202 and body["status"] == "enrolling", body

    two = make_settings(avatar_store=str(tmp_path / "store2"), upload_dir=folders[0], max_enrolments=2)
    async with running_server(two, config="puppet") as srv, upload(srv.url, "first", "video/mp4") as first:
        await first.send(CHUNK)
        assert await wait_until(lambda: srv.manager.personal.uploads.disk_bytes() >= len(CHUNK), 5)
        second = await srv.http.post("/v1/avatars", params={"name": "second"}, content=CHUNK,
                                     headers={"Content-Type": "video/mp4"})
        assert second.status_code == 429 and second.json()["error"]["code"] == "upload_busy", second.text
        assert (await first.finish())[0] == 202


async def test_a_client_that_leaves_mid_upload_leaves_nothing_behind(folders, tmp_path):
    settings = make_settings(avatar_store=str(tmp_path / "store"), upload_dir=folders[0])
    async with running_server(settings, config="puppet") as srv:
        async with upload(srv.url, "gone", f"multipart/form-data; boundary={BOUNDARY}") as up:
            await up.send(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="video"\r\n\r\n'.encode() + CHUNK)
            assert await wait_until(lambda: srv.manager.personal.uploads.disk_bytes() > 0, 5)
        assert await wait_until(lambda: srv.manager.personal.uploads.files() == [], 5)
        res = await srv.http.post("/v1/avatars", params={"name": "gone"}, content=b"not a video" * 100,
                                  headers={"Content-Type": "video/mp4"})
        assert res.status_code == 202, res.text
        jobs = srv.manager.personal.enrolments
        assert await wait_until(lambda: jobs["gone"].status == "failed", 10)
        assert srv.manager.personal.uploads.files() == []  # the enrolment's clip removed when it ended
        folder = srv.manager.personal.uploads.path
    assert not folder.exists() and os.listdir(folders[0]) == []  # the server's folder removed as it stopped


async def test_an_enrolment_past_its_time_fails_with_timeout_and_frees_its_slot(folders, tmp_path):
    write_long_blank(clip := tmp_path / "clip.mp4", 11)
    settings = make_settings(avatar_store=str(tmp_path / "store"), upload_dir=folders[0], enrolment_timeout_s=0.001)
    async with running_server(settings, config="puppet") as srv:
        res = await srv.http.post("/v1/avatars", params={"name": "slow"}, content=clip.read_bytes(),
                                  headers={"Content-Type": "video/mp4"})
        assert res.status_code == 202, res.text
        jobs = srv.manager.personal.enrolments
        assert await wait_until(lambda: jobs["slow"].status == "failed", 10)
        failed = (await srv.http.get("/v1/avatars/slow")).json()
        assert failed["error"]["code"] == "timeout" and failed["error"]["message"].startswith("timeout:"), failed
        again = await srv.http.post("/v1/avatars", params={"name": "next"}, content=clip.read_bytes(),
                                    headers={"Content-Type": "video/mp4"})
        assert again.status_code == 202, again.text  # the slot was freed
        assert await wait_until(lambda: srv.manager.personal.uploads.files() == [], 10)


@pytest.mark.slow
async def test_an_undeclared_upload_through_a_nodes_front_is_streamed_and_stopped(tmp_path):
    """The front streams the clip on to its web process (never holding it) and relays the 413."""
    env = {"AVATAR_ENGINE_SETTLE_S": "0", "AVATAR_WARM_UP": "false", "AVATAR_UPLOAD_DIR": str(tmp_path / "uploads"),
           "AVATAR_AVATAR_STORE": str(tmp_path / "store")}
    async with spawned_server("micro", threads=1, extra=("--web-processes", "2"), env=env) as srv:
        before = int(Path(f"/proc/{srv.pid}/status").read_text().split("VmRSS:")[1].split()[0]) * 1024
        Path(f"/proc/{srv.pid}/clear_refs").write_text("5")
        async with upload(srv.url, "big", "video/mp4") as up:
            cap = avatars_api.MAX_VIDEO_BYTES
            peak, (status, body) = await flood(up, 2 * cap, (tmp_path / "uploads",))
        assert status == 413 and body["error"]["code"] in ("video_too_large", "body_too_large"), body
        assert up.sent < cap + 64 * CAP and peak <= cap + len(CHUNK)
        grew = int(Path(f"/proc/{srv.pid}/status").read_text().split("VmHWM:")[1].split()[0]) * 1024 - before
        assert grew < 64 * CAP, f"the front's memory rose {grew / 2**20:.0f} MB"
        assert await wait_until(lambda: disk_bytes(tmp_path / "uploads") == 0, 10)
