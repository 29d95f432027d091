"""A worker's warm-up: a silent session decoded and one drawn, so the first real session of
either kind finds its stages made (the drawn one: the motion reader loaded, the redraw stage built)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.pipeline import Pipeline, warm_up
from engine.puppet.engine import PuppetPipeline


def _two_chunks(pipe: Pipeline | PuppetPipeline) -> int:
    """The frames of a render of the warm-up's silence: its first chunk and one more."""
    samples = pipe.first_chunk_samples + pipe.frames_per_chunk * pipe.config.samples_per_frame
    return sum(1 for _ in pipe.render(np.zeros(samples, np.float32)))


@pytest.mark.usefixtures("one_thread")
def test_a_learned_pipeline_warms_up_decoded_and_drawn(micro_weights: Path) -> None:
    pipe = Pipeline.from_config("micro", weights=micro_weights)
    one = _two_chunks(pipe)
    assert one > pipe.frames_per_chunk and pipe._redraw is None
    assert warm_up(pipe) == 2 * one
    assert pipe._redraw is not None


def test_the_puppet_warms_up_once() -> None:
    pipe = PuppetPipeline.from_config("puppet")
    assert warm_up(pipe) == _two_chunks(pipe)
