"""What the Docker images run, run outside Docker (these machines have no Docker daemon): each
Dockerfile's ENV and CMD. Bound to 0.0.0.0 without a token the server refuses in one line; with one
it serves, says in one line that sessions need it, and refuses sessions without it. The images carry
WebRTC: a fixed UDP range, exposed, that the server binds its media to."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_helpers import free_port

from server.config import Settings

DOCKER = Path(__file__).resolve().parents[2] / "docker"
IMAGES = ["Dockerfile.cpu", "Dockerfile.cuda"]
BIN = Path(sys.executable).parent


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def image_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, args in instructions(path):
        if name == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(args))
    return env


def image_cmd(path: Path) -> list[str]:
    (cmd,) = [json.loads(args) for name, args in instructions(path) if name == "CMD"]
    return cmd


def run_env(path: Path, **extra: str) -> dict[str, str]:
    """This machine's environment without AVATAR_* settings, then the image's ENV (its PATH kept ours:
    the image's venv is this checkout's), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AVATAR_")}
    env.update({k: v for k, v in image_env(path).items() if k != "PATH"})
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ['PATH']}"
    env.update(extra)
    return env


@pytest.mark.parametrize("image", IMAGES)
def test_image_serves_webrtc_on_a_fixed_udp_range(image):
    path = DOCKER / image
    env = image_env(path)
    settings = Settings.from_env(env)
    assert settings.network.host == "0.0.0.0" and settings.network.exposed and settings.network.ice_ports is not None
    low, high = settings.network.ice_ports
    exposed = " ".join(args for name, args in instructions(path) if name == "EXPOSE").split()
    assert f"{low}-{high}/udp" in exposed and f"{settings.network.port}/tcp" in exposed
    assert image_cmd(path)[:2] == ["avatar", "serve"]
    assert "espeak" not in path.read_text()  # the default voice needs no system package


@pytest.mark.parametrize("image", IMAGES)
def test_without_a_token_the_image_refuses_in_one_line(image):
    path = DOCKER / image
    done = subprocess.run(image_cmd(path), env=run_env(path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "0.0.0.0" in line and "AVATAR_AUTH_TOKEN" in line, line


async def test_with_a_token_the_cpu_image_serves_and_guards_sessions():
    path = DOCKER / "Dockerfile.cpu"
    port = free_port()
    env = run_env(path, AVATAR_AUTH_TOKEN="s3cret", AVATAR_PORT=str(port), AVATAR_CONFIG="puppet",
                  AVATAR_WARM_UP="false", AVATAR_ENGINE_THREADS="1")
    proc = subprocess.Popen(image_cmd(path), env=env, stderr=subprocess.PIPE, text=True)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, proc.stderr.read()
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the image's command did not come up"
                await asyncio.sleep(0.3)
            refused = await http.post("/v1/sessions", json={"mode": "agent"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "bad_token"
            created = await http.post("/v1/sessions", json={"mode": "agent"},
                                      headers={"Authorization": "Bearer s3cret"})
            assert created.status_code == 201, created.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    notes = [line for line in err.splitlines() if line.startswith("avatar serve: bound to")]
    assert notes == ["avatar serve: bound to 0.0.0.0, reachable beyond this machine: creating a session "
                     "needs the bearer token (AVATAR_AUTH_TOKEN)"], err[-2000:]
