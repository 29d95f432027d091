"""Shared checks of the batched-execution tests: two sessions (or two runs of one) that must
have published the same frames and be left in the same rolling state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

import engine.stages.decode_publish as decode_publish
from engine.frames import PublishedFrame
from engine.pipeline import StreamSession

ATOL = 1e-5  # fp32: a batch of sessions against each alone


@contextmanager
def float_frames(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.Tensor]]:
    """Every decoded video, in float and in call order, just before it becomes uint8 frames
    (one call per session and publish, batched or not)."""
    seen: list[torch.Tensor] = []
    to_uint8 = decode_publish.to_uint8

    def spy(frames: torch.Tensor) -> np.ndarray:
        seen.append(frames.float().clone())
        return to_uint8(frames)

    with monkeypatch.context() as m:
        m.setattr(decode_publish, "to_uint8", spy)
        yield seen


def assert_same_frames(a: list[PublishedFrame], b: list[PublishedFrame]) -> None:
    """Same frames: indices, timestamps, audio and producing chunks exactly; RGB to within one
    level (a float difference of 1e-6 may round the other way)."""
    assert [(f.index, f.pts, f.chunk) for f in a] == [(f.index, f.pts, f.chunk) for f in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.audio, y.audio)
        assert np.abs(x.rgb.astype(int) - y.rgb.astype(int)).max() <= 1, x.index


def assert_close(a: torch.Tensor | None, b: torch.Tensor | None, what: str) -> None:
    assert (a is None) == (b is None), what
    if a is not None:
        assert a.shape == b.shape, what
        assert a.numel() == 0 or (a - b).abs().max() <= ATOL, what


def assert_same_state(a: StreamSession, b: StreamSession) -> None:
    """Same rolling state, each tensor owned by its session (one row, not a slice of a batch)."""
    sa, sb = a.state, b.state
    assert sa.counters == sb.counters
    assert a.schedule == b.schedule and a.finished == b.finished
    assert (sa.history is None) == (sb.history is None)
    if sa.history is not None:
        ka, kb = sa.history.kv, sb.history.kv
        assert torch.equal(ka.frame, kb.frame)
        assert kb.k.shape[1] == 1 and sb.history.latents.shape[0] == 1
        assert_close(ka.k, kb.k, "history k")
        assert_close(ka.v, kb.v, "history v")
        assert_close(sa.history.latents, sb.history.latents, "history latents")
        assert_close(sa.history.audio, sb.history.audio, "history audio")
    assert (sa.latents is None) == (sb.latents is None)
    if sa.latents is not None:
        assert (sa.latents.start, sa.latents.origin) == (sb.latents.start, sb.latents.origin)
        assert_close(sa.latents.data, sb.latents.data, "latents")
    assert sa.decoder.started == sb.decoder.started
    assert sb.decoder.reference is sb.reference.decoder  # not a slice of the batch's stacked copy
    for pa, pb in zip(sa.decoder.prev, sb.decoder.prev, strict=True):
        assert pb.shape[0] == 1
        assert_close(pa, pb, "decoder cache")
    assert_close(sa.last_frame, sb.last_frame, "last frame")
    assert a.audio.offset == b.audio.offset
    assert a.nbytes() == b.nbytes()
