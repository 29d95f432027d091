"""A CTranslate2 model file's arrays come back by name, aliases included; another format is refused."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from engine.speech.ct2_file import ModelFileError, read_variables


def _text(value: str) -> bytes:
    raw = value.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _model(path: Path, arrays: dict[str, np.ndarray], aliases: dict[str, str], version: int = 6) -> Path:
    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.float16): 4}
    out = struct.pack("<I", version) + _text("WhisperSpec") + struct.pack("<II", 3, len(arrays))
    for name, a in arrays.items():
        out += _text(name) + struct.pack("<B", a.ndim) + struct.pack("<" + "I" * a.ndim, *a.shape)
        out += struct.pack("<BI", codes[a.dtype], a.nbytes) + a.tobytes()
    out += struct.pack("<I", len(aliases)) + b"".join(_text(k) + _text(v) for k, v in aliases.items())
    path.write_bytes(out)
    return path


def test_arrays_and_aliases_come_back_by_name(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"encoder/conv1/weight": rng.standard_normal((4, 3, 2)).astype(np.float16),
              "encoder/num_heads": np.array(6, np.int16),
              "decoder/embeddings/weight": rng.standard_normal((5, 2)).astype(np.float32)}
    aliases = {"decoder/projection/weight": "decoder/embeddings/weight"}
    got = read_variables(_model(tmp_path / "model.bin", arrays, aliases))
    assert set(got) == {*arrays, "decoder/projection/weight"}
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name], a)
    assert np.array_equal(got["decoder/projection/weight"], arrays["decoder/embeddings/weight"])


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="format 5"):
        read_variables(_model(tmp_path / "model.bin", {}, {}, version=5))
