"""The one folder a web process's uploads lie in while they arrive and are enrolled.

Every uploaded clip is a file in ``<root>/<pid>-<id>/`` (one folder per server in the process):
the process removes each when its request
or its enrolment ends, and the whole folder when it stops; a process that was killed leaves its
folder behind, removed by the next one that starts (its pid no longer runs). So the disk an
upload takes is found in one place and never outlives what it was for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "avatar-uploads"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class UploadFolder:
    """``<root>/<this pid>-<id>/``, created now; the folders of processes gone are removed."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.iterdir():
            pid = stale.name.partition("-")[0]
            if stale.is_dir() and pid.isdigit() and not _running(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
        self.path = self.root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()

    def new_file(self) -> Path:
        """A fresh name for one upload (created by whoever writes it)."""
        return self.path / f"{uuid.uuid4().hex}.video"

    def files(self) -> list[Path]:
        return sorted(self.path.iterdir()) if self.path.is_dir() else []

    def disk_bytes(self) -> int:
        """What the uploads in the folder take on disk now."""
        return sum(f.stat().st_size for f in self.files())

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
