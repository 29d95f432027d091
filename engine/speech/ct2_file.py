"""The named arrays of a CTranslate2 model file (``model.bin``, format version 6)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


class ModelFileError(ValueError):
    """The file is not a CTranslate2 model this reader knows."""


def read_variables(path: Path) -> dict[str, np.ndarray]:
    """Every variable of the model, by name (aliases resolved to the arrays they name)."""
    data = Path(path).read_bytes()
    at = 0

    def take(fmt: str) -> tuple:
        nonlocal at
        values = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return values

    def text() -> str:
        nonlocal at
        (size,) = take("<H")
        value = data[at:at + size - 1].decode()
        at += size
        return value

    (version,) = take("<I")
    if version != 6:
        raise ModelFileError(f"{path}: CTranslate2 model format {version}, this reader knows 6")
    text()  # the spec's name
    take("<I")  # its revision
    (count,) = take("<I")
    out: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = text()
        (rank,) = take("<B")
        dims = take("<" + "I" * rank)
        (dtype_id,) = take("<B")
        (size,) = take("<I")
        if dtype_id not in DTYPES:
            raise ModelFileError(f"{path}: {name} has an unknown type {dtype_id}")
        dtype = np.dtype(DTYPES[dtype_id])
        out[name] = np.frombuffer(data, dtype, size // dtype.itemsize, at).reshape(dims)
        at += size
    (aliases,) = take("<I")
    for _ in range(aliases):
        alias, target = text(), text()
        out[alias] = out[target]
    return out
