"""Voice activity: the probability that a 32 ms window of 16 kHz audio holds speech.

Silero VAD's ONNX model (shipped inside the ``silero-vad`` package) runs through onnxruntime
on one thread (~0.3 ms a window), with its recurrent state passed in and out explicitly, so
one loaded model serves every stream. The package itself is never imported: importing it sets
torch's global thread count to 1, which would halve the engine's speed; only its model file
is used. The server's barge-in and the mouth tracker's speech gate both use it.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

VAD_RATE = 16_000
WINDOW = 512  # samples at 16 kHz: the model's only window size
CONTEXT = 64  # samples of the previous window the model sees in front of each window
INSTALL = "pip install silero-vad"


class VadUnavailable(RuntimeError):
    """The silero-vad package (which ships the model) is not installed."""


def model_path() -> Path:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VadUnavailable(f"voice activity detection needs the silero-vad package: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise VadUnavailable(f"silero-vad is installed but its model {path} is missing")
    return path


@functools.cache
def _session():
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model_path()), sess_options=opts, providers=["CPUExecutionProvider"])


class SileroVAD:
    """Speech probability of consecutive 512-sample windows at 16 kHz; one instance per audio stream."""

    def __init__(self) -> None:
        self._session = _session()
        self._sr = np.array(VAD_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros(CONTEXT, np.float32)

    def __call__(self, window: np.ndarray) -> float:
        x = np.concatenate([self._context, window.astype(np.float32, copy=False)])[None, :]
        out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = x[0, -CONTEXT:]
        return float(out[0, 0])
