"""Personal avatars on disk: one folder per name under the store's root.

The root is ``AVATAR_STORE``, else ``$XDG_DATA_HOME/avatar/avatars``, else
``~/.local/share/avatar/avatars``. A folder holds ``rest.png`` (the 512² rest frame the
sessions animate), ``avatar.npz`` (its landmarks and the person's mouth bank) and
``avatar.json`` (the enrolment report, when it was made); the npz also holds how much the
person sways. A folder is written under a temporary name and renamed into place, so a listing
never shows half an avatar; names are checked before they touch the file system (no paths, no
traversal, no bundled avatar's name).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np

from engine.face.footage import MouthBank
from engine.face.landmarks import Face
from engine.personal.enroll import EnrollReport
from engine.photo.avatar import PhotoAvatar

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
NAME_RULE = "1-40 characters: lowercase letters, digits, '-' and '_', starting with a letter or digit"


class StoreError(ValueError):
    """A store request that cannot be met; ``status`` is the HTTP status it maps to."""

    def __init__(self, reason: str, status: int = 400):
        super().__init__(reason)
        self.reason = reason
        self.status = status


def default_root() -> Path:
    if root := os.environ.get("AVATAR_STORE"):
        return Path(root)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "avatar" / "avatars"


class AvatarStore:
    """The personal avatars under ``root`` (created on first save)."""

    def __init__(self, root: str | Path | None = None, reserved: tuple[str, ...] = ()) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.reserved = frozenset(reserved)  # the bundled avatars' names

    def check_name(self, name: str) -> str:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise StoreError(f"bad avatar name {name[:60]!r}: {NAME_RULE}")
        if name in self.reserved:
            raise StoreError(f"{name!r} is a bundled avatar's name", 409)
        return name

    def _folder(self, name: str) -> Path:
        return self.root / self.check_name(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(NAME.fullmatch(name)) and (self.root / name / "avatar.json").is_file()

    def save(self, name: str, avatar: PhotoAvatar, report: EnrollReport) -> dict:
        """Store ``avatar`` as ``name`` (``StoreError`` 409 if the name is taken); its listing entry."""
        from PIL import Image

        folder = self._folder(name)
        if folder.exists():
            raise StoreError(f"an avatar named {name!r} exists already", 409)
        if avatar.mouths is None:
            raise StoreError("only an enrolled avatar (with its own mouth) is stored")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.mkdir()
        try:
            Image.fromarray(avatar.image).save(tmp / "rest.png")
            b = avatar.mouths
            np.savez_compressed(tmp / "avatar.npz", landmarks=avatar.face.landmarks, patches=b.patches, lips=b.lips,
                                openings=b.openings, widths=b.widths, rest_width=np.float32(b.rest_width),
                                coverage=np.float32(b.coverage), sway=np.float32(avatar.sway))
            meta = {"name": name, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **report.as_dict()}
            meta["disk_bytes"] = sum(p.stat().st_size for p in tmp.iterdir()) + len(json.dumps(meta)) + 24
            (tmp / "avatar.json").write_text(json.dumps(meta, indent=2) + "\n")
            try:
                tmp.rename(folder)
            except OSError:
                raise StoreError(f"an avatar named {name!r} exists already", 409) from None
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return meta

    def load(self, name: str) -> PhotoAvatar:
        """The stored avatar ``name`` (``StoreError`` 404 if there is none)."""
        from PIL import Image

        folder = self._folder(name)
        if name not in self:
            raise StoreError(f"no avatar named {name!r}", 404)
        image = np.array(Image.open(folder / "rest.png").convert("RGB"))
        with np.load(folder / "avatar.npz") as z:
            bank = MouthBank(patches=z["patches"], lips=z["lips"], openings=z["openings"], widths=z["widths"],
                             rest_width=float(z["rest_width"]), coverage=float(z["coverage"]))
            face = Face(z["landmarks"].astype(np.float32))
            sway = float(z["sway"]) if "sway" in z.files else 1.0
        return PhotoAvatar(np.ascontiguousarray(image), face, bank, sway)

    def info(self, name: str) -> dict:
        if name not in self:
            raise StoreError(f"no avatar named {name!r}", 404)
        return json.loads((self._folder(name) / "avatar.json").read_text())

    def list(self) -> list[dict]:
        if not self.root.is_dir():
            return []
        return [self.info(p.name) for p in sorted(self.root.iterdir()) if p.name in self]

    def remove(self, name: str) -> None:
        folder = self._folder(name)
        if name not in self:
            raise StoreError(f"no avatar named {name!r}", 404)
        shutil.rmtree(folder)
