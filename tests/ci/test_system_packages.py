"""``.ci/system-packages`` (what ``make run`` / ``make test`` call first): missing Debian packages are
installed with apt-get as root or with sudo, ``apt-get update`` first; without either it stops at once
with one line naming the command. Run against a PATH of stand-in tools, so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "system-packages"
TEST_PACKAGES = "make espeak-ng flite chromium npm"


def stand_ins(folder: Path, uid: int, **scripts: str) -> dict[str, str]:
    """A PATH holding bash, env, a python3 that has venv, an ``id`` saying ``uid``, and ``scripts``."""
    folder.mkdir(exist_ok=True)
    for tool in ("bash", "env"):
        (folder / tool).symlink_to(shutil.which(tool))
    scripts = {"python3": "exit 0", "id": f"echo {uid}", **scripts}
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {"PATH": str(folder), "HOME": str(folder)}


def run(env: dict[str, str], target: str = "test") -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), target], env=env, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def test_without_root_or_sudo_it_stops_with_one_line_naming_the_command(tmp_path):
    done = run(stand_ins(tmp_path / "bin", uid=1000))
    assert done.returncode == 1 and done.stdout == ""
    command = f"sudo apt-get update && sudo apt-get install -y {TEST_PACKAGES}"
    assert done.stderr.splitlines() == [f"missing system packages ({TEST_PACKAGES}): run  {command}"]


def test_a_sudo_that_asks_for_a_password_off_a_terminal_counts_as_none(tmp_path):
    done = run(stand_ins(tmp_path / "bin", uid=1000, sudo="exit 1"))
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert "sudo apt-get install -y" in done.stderr


@pytest.mark.parametrize("uid, sudo", [(0, None), (1000, "sudo")])
def test_as_root_or_with_sudo_it_updates_then_installs(tmp_path, uid, sudo):
    calls = tmp_path / "calls"
    scripts = {"apt-get": f'echo "apt-get $*" >> {calls}'}
    if sudo:
        scripts["sudo"] = f'[ "$1" = -n ] && exit 0; echo sudo >> {calls}; exec "$@"'
    done = run(stand_ins(tmp_path / "bin", uid=uid, **scripts))
    assert done.returncode == 0, done.stderr
    expected = ["apt-get update -q", f"apt-get install -y -q --no-install-recommends {TEST_PACKAGES}"]
    if sudo:
        expected = ["sudo", expected[0], "sudo", expected[1]]
    assert calls.read_text().splitlines() == expected
    assert done.stderr.splitlines() == [f"installing system packages: {TEST_PACKAGES}"]


def test_run_needs_no_system_package_beyond_python_venv(tmp_path):
    env = stand_ins(tmp_path / "bin", uid=1000, make="exit 0")
    done = run(env, "run")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    (tmp_path / "bin" / "python3").write_text("#!/bin/sh\nexit 1\n")  # no venv/ensurepip
    done = run(env, "run")
    assert done.returncode == 1 and "apt-get install -y python3-venv" in done.stderr


@pytest.mark.skipif(not all(shutil.which(t) for t in ("make", "espeak-ng", "flite", "chromium", "npm")),
                    reason="this machine lacks a package: make test installs it")
def test_on_this_machine_everything_is_there():
    done = subprocess.run([str(SCRIPT), "test"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
