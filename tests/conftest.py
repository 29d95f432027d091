"""Shared fixtures.

Engine tests (``tests/engine/``) use a session-wide ``micro`` pipeline whose
weights are random but *alive*: the modules zero-initialise their output layers (so a
fresh DiT predicts zero velocity and a fresh SR adds nothing), which would make many
checks vacuous, so every all-zero parameter gets small seeded random values and the set
is saved and loaded back through the real checkpoint path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.bench import speech_like
from engine.config import get_config
from engine.models import ModelSet
from engine.modules.base import Module
from engine.pipeline import Pipeline


def enliven(module: Module, seed: int, std: float = 0.05) -> Module:
    """Give every all-zero parameter of ``module`` seeded random values (in place)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if not bool(p.detach().abs().max() > 0):
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return module


def living_models(config_name: str = "micro", seed: int = 0) -> ModelSet:
    """A ModelSet with deterministic random weights and no zero-initialised outputs."""
    models = ModelSet.build(get_config(config_name), seed)
    for i, module in enumerate(models.modules().values()):
        enliven(module, seed * 100 + i + 1)
    return models


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one thread for a test that times nothing; the previous count is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def micro_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of ``micro`` checkpoints (``<name>.safetensors``) with living weights."""
    folder = tmp_path_factory.mktemp("micro_weights")
    living_models("micro").save_dir(folder)
    return folder


@pytest.fixture(scope="session")
def micro_pipe(micro_weights: Path) -> Pipeline:
    pipe = Pipeline.from_config("micro", weights=micro_weights)
    assert pipe.weights_loaded == ["audio", "encoder", "dit", "sr", "decoder"]
    return pipe


@pytest.fixture(scope="session")
def micro_pipe_nointerp(micro_weights: Path) -> Pipeline:
    pipe = Pipeline.from_config("micro", interp=False, weights=micro_weights)
    assert pipe.weights_loaded == ["audio", "encoder", "dit", "sr", "decoder"]
    return pipe


@pytest.fixture(scope="session")
def speech() -> Callable[..., np.ndarray]:
    """``speech(seconds, seed=0, sample_rate=16000)``: deterministic speech-like float32 mono."""

    def make(seconds: float, seed: int = 0, sample_rate: int = 16000) -> np.ndarray:
        return speech_like(seconds, sample_rate, seed)

    return make


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    """scikit-image's astronaut portrait (a NASA photograph, public domain), 512x512 RGB."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


@pytest.fixture(scope="session")
def astronaut_face(astronaut):
    from engine.face import find_face

    return find_face(astronaut)


@pytest.fixture(scope="session")
def astronaut_crop(astronaut, astronaut_face):
    from engine.face import crop_face

    return crop_face(astronaut, astronaut_face, 512)


@pytest.fixture(scope="session")
def astronaut_rig(astronaut_crop):
    from engine.face import PhotoRig

    crop, face = astronaut_crop
    return PhotoRig.from_photo(crop, face)


def pytest_sessionfinish(session, exitstatus) -> None:
    """aiortc decoder threads are not daemons: one whose receiver was never stopped (a peer a test
    left open) would keep the finished run from exiting. Name them, then let them end."""
    import threading
    import warnings

    left = [t for t in threading.enumerate() if t.name in ("audio-decoder", "video-decoder") and t.is_alive()]
    for thread in left:
        thread._args[1].put(None)  # decoder_worker(loop, input queue, ...): None ends it
    if left:
        warnings.warn(f"{len(left)} aiortc decoder thread(s) outlived their peers: a peer left unclosed",
                      stacklevel=1)


TESTS = Path(__file__).parent
# Folders of tests that stream nothing against a real clock and measure no capacity (the engine's
# models, evaluation, faces and training; playout on a fake clock) less the engine's serving and
# ranks; a module elsewhere may mark itself ``offline`` too.
OFFLINE_FOLDERS = (TESTS / "engine", TESTS / "server" / "media" / "playout")
LIVE_FOLDERS = (TESTS / "engine" / "service", TESTS / "engine" / "parallel")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the offline folders' tests ``offline``: `make test` runs them on two workers."""
    for item in items:
        parents = Path(item.path).parents
        if any(f in parents for f in OFFLINE_FOLDERS) and not any(f in parents for f in LIVE_FOLDERS):
            item.add_marker("offline")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker's torch gets its share of the cores, not all of them."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))
