"""What hostile enrolment uploads cost a server: its peak memory and the disk its uploads take.

    python bench/hostile_uploads.py [--flood-gb 1.5] [--clip-seconds 60]

``avatar serve`` runs in its own process on loopback (tiny engine, one thread) with its upload
folder and store in a temporary folder; this process, the attacker, sends in turn: a chunked
``multipart/form-data`` body of ``--flood-gb`` with no declared length; four 190 MB uploads at
once; a 576 KB H.264 file of three 14000×14000 frames (a video bomb); and a real clip of
``--clip-seconds`` (a test portrait talking, H.264 720²). For each it prints the answers, the
server's peak resident memory over its size before (``VmHWM``, reset per case) and the peak of
the upload folder on disk and the growth of its file system's use (which counts a form parser's
unnamed spool files too; other processes' writes show in it as well), sampled every 10 ms. Prints
one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name
CHUNK = b"\0" * (1 << 20)
BOUNDARY = "b0undary"


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


class Peaks:
    """The server's peak memory (its ``VmHWM`` reset at the start) and the folder's peak size."""

    def __init__(self, pid: int, folder: Path) -> None:
        self.pid, self.folder = pid, folder
        self.disk = self.filesystem = 0
        self._stop = threading.Event()

    def __enter__(self) -> Peaks:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.rss_before = status(self.pid, "VmRSS")
        self.used_before = _used(self.folder)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            size = sum(f.stat().st_size for f in self.folder.rglob("*") if f.is_file())
            self.disk = max(self.disk, size)
            self.filesystem = max(self.filesystem, _used(self.folder) - self.used_before)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.rss_peak = status(self.pid, "VmHWM")

    def figures(self) -> dict:
        return {"server_rss_before_mb": round(self.rss_before / 2**20),
                "server_rss_peak_mb": round(self.rss_peak / 2**20), "upload_disk_peak_mb": round(self.disk / 2**20, 1),
                "filesystem_peak_mb": round(self.filesystem / 2**20, 1)}


def _used(folder: Path) -> int:
    """Bytes in use on the file system holding ``folder`` (temporary files with no name count too)."""
    fs = os.statvfs(folder if folder.exists() else folder.parent)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


async def upload(port: int, name: str, total: int, multipart: bool) -> tuple[int, dict, int, float]:
    """A chunked ``POST /v1/avatars`` of ``total`` bytes, sent until the server answers: (status, body,
    bytes sent, seconds)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    kind = f"multipart/form-data; boundary={BOUNDARY}" if multipart else "video/mp4"
    writer.write(f"POST /v1/avatars?name={name} HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\n"
                 f"Transfer-Encoding: chunked\r\n\r\n".encode())
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="video"; filename="a.mp4"\r\n\r\n'.encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    async def answer() -> tuple[int, dict]:
        response = await reader.readuntil(b"\r\n\r\n")
        length = next(int(v.split(b":")[1]) for v in response.split(b"\r\n") if v.lower().startswith(b"content-length"))
        return int(response.split()[1]), json.loads(await reader.readexactly(length))

    t0, sent = time.monotonic(), 0
    answered = asyncio.ensure_future(answer())
    pieces = ([head] if multipart else []) + [CHUNK] * (total // len(CHUNK)) + ([tail] if multipart else [])
    try:
        for piece in pieces:
            if answered.done():
                break
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            sent += len(piece)
        else:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    code, body = await answered
    writer.close()
    return code, body, sent, round(time.monotonic() - t0, 2)


async def post_file(port: int, name: str, data: bytes) -> tuple[int, dict]:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        res = await http.post("/v1/avatars", params={"name": name}, content=data, headers={"Content-Type": "video/mp4"})
        return res.status_code, res.json()


async def enrolled(port: int, name: str) -> dict:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        while (state := (await http.get(f"/v1/avatars/{name}")).json()).get("status") == "enrolling":
            await asyncio.sleep(0.1)
        return state


def bomb(path: Path) -> None:
    """Three 14000×14000 H.264 frames, made in a child process (the encoder takes 2 GB)."""
    code = f"""
import av
with av.open({str(path)!r}, "w") as c:
    s = c.add_stream("libx264", rate=25); s.width = s.height = 14000; s.pix_fmt = "yuv420p"
    s.options = {{"preset": "ultrafast", "crf": "51", "tune": "zerolatency", "threads": "1"}}
    f = av.VideoFrame(14000, 14000, "yuv420p")
    for p in f.planes: p.update(bytes(p.buffer_size))
    for i in range(3):
        f.pts = i
        for k in s.encode(f): c.mux(k)
    for k in s.encode(): c.mux(k)
"""
    subprocess.run([sys.executable, "-c", code], check=True)


async def run(args: argparse.Namespace, port: int, pid: int, folder: Path, work: Path) -> dict:
    out: dict = {}
    with Peaks(pid, folder) as peaks:
        code, body, sent, took = await upload(port, "flood", int(args.flood_gb * 2**30), multipart=True)
    out["multipart_flood"] = {"status": code, "code": body["error"]["code"], "sent_mb": round(sent / 2**20, 1),
                              "seconds": took, **peaks.figures()}
    with Peaks(pid, folder) as peaks:
        results = await asyncio.gather(*(upload(port, f"par{i}", 190 * 2**20, multipart=False) for i in range(4)))
    out["four_parallel_190mb"] = {"answers": [(c, b.get("status") or b["error"]["code"], round(s / 2**20), t)
                                              for c, b, s, t in results], **peaks.figures()}
    await enrolled(port, next(f"par{i}" for i, r in enumerate(results) if r[0] == 202))
    path = work / "bomb.mp4"
    bomb(path)
    with Peaks(pid, folder) as peaks:
        answer = await post_file(port, "bomb", path.read_bytes())
        state = await enrolled(port, "bomb")
    out["bomb_14000"] = {"file_kb": path.stat().st_size // 1024, "answer": answer[0],
                         "result": state.get("error", state.get("status")), **peaks.figures()}
    from personal_helpers import jaw_track, portrait_rig, write_footage

    clip = work / "clip.mp4"
    write_footage(clip, portrait_rig("christophe_henner"), jaw_track(args.clip_seconds), canvas=720)
    with Peaks(pid, folder) as peaks:
        t0 = time.monotonic()
        answer = await post_file(port, "person", clip.read_bytes())
        state = await enrolled(port, "person")
    out[f"clip_{args.clip_seconds:.0f}s"] = {"file_mb": round(clip.stat().st_size / 2**20, 1), "answer": answer[0],
                                            "status": state["status"], "seconds": round(time.monotonic() - t0, 1),
                                            **peaks.figures()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood-gb", type=float, default=1.5)
    parser.add_argument("--clip-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "AVATAR_UPLOAD_DIR": str(work / "uploads"), "AVATAR_AVATAR_STORE": str(work / "store"),
               "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "serve_loopback.py"), "--port", str(port),
                                   "--config", "tiny", "--threads", "1", "--log-level", "warning"], env=env)
        try:
            import httpx

            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            print(json.dumps(asyncio.run(run(args, port, server.pid, work / "uploads", work)), indent=1))
        finally:
            server.terminate()
            server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
