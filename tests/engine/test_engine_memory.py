"""Constant memory: a long streaming session holds the same bytes at chunk 2,000 as at 20.

The session is fed speech-like audio piece by piece, as a live stream would be, and
stepped by hand; held tensor bytes (``session.nbytes()``) and process RSS are read at
the same point of the schedule (right after an N chunk) at chunk 20 and chunk 2,000.
RSS is read after ``gc.collect()`` and glibc ``malloc_trim(0)`` so that freed-but-cached
heap pages do not count as held memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path

import numpy as np
import pytest

from engine.bench import rss_bytes
from engine.modules.vae import latent_frames
from engine.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("one_thread")

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _malloc_trim = _libc.malloc_trim
except (OSError, AttributeError):  # not glibc: RSS is read as it is
    _malloc_trim = None


def settled_rss() -> int:
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    return rss_bytes()


@pytest.fixture(scope="module")
def soak_pipe(micro_weights: Path) -> Pipeline:
    """The ``micro`` pipeline at one sampling step: the same code paths, fewer DiT passes."""
    pipe = Pipeline.from_config("micro", steps=1, weights=micro_weights)
    assert pipe.steps == 1 and pipe.weights_loaded == ["audio", "encoder", "dit", "sr", "decoder"]
    return pipe


def test_memory_is_flat_over_2000_chunks(soak_pipe: Pipeline, speech) -> None:
    pipe = soak_pipe
    cfg = pipe.config
    c, s, a = cfg.schedule.chunk, cfg.schedule.seam, cfg.schedule.anchor
    td, spf = cfg.vae.temporal_down, cfg.samples_per_frame
    piece = c * td * spf  # one N chunk of audio per feed, like a live source
    source = speech(20.0, seed=1)
    session = pipe.open_session(seed=2)
    fed = 0
    frames = 0
    last_index = -1
    marks: dict[int, tuple[int, int]] = {}
    audio_max: list[int] = []
    window_max: list[int] = []
    history_frames: set[int] = set()
    while session.state.counters.chunks < 2000:
        if not session.ready():
            start = (fed // piece * 7919) % (source.size - piece)  # wander through the source
            session.feed(source[start:start + piece])
            fed += piece
            continue
        out = session.step()
        assert out or session.last_chunk.startswith("N")
        for f in out:
            assert f.index == last_index + 1
            last_index = f.index
        frames += len(out)
        done = session.state.counters.chunks
        # bounded state, checked after every chunk
        audio_max.append(session.audio.nbytes())
        window = session.state.latents
        window_max.append(0 if window is None else window.data.shape[0])
        if session.state.history is not None:
            history_frames.add(len(session.state.history.frames()))
        if done in (20, 2000):
            assert session.last_chunk.startswith("N")  # same phase of the schedule both times
            marks[done] = (session.nbytes(), settled_rss())

    n_chunks = session.state.counters.next_n
    assert session.last_chunk == f"N{n_chunks - 1}" and n_chunks == 1001
    # every frame up to the published latent came out exactly once, in order
    assert frames == last_index + 1 == latent_frames(session.state.counters.published, td)[0]

    held20, rss20 = marks[20]
    held2000, rss2000 = marks[2000]
    assert abs(held2000 - held20) <= 0.02 * held20, (held20, held2000)
    assert abs(rss2000 - rss20) <= 0.02 * rss20, (rss20 / 2**20, rss2000 / 2**20)

    # the latent window never holds more than one N chunk plus one I chunk's left side
    assert max(window_max) <= c + s + a
    assert max(window_max[1000:]) == max(window_max[20:1000])
    # the history window holds exactly `window` latent frames once the stream is under way
    assert history_frames <= set(range(1, cfg.dit.window + 1)) and cfg.dit.window in history_frames
    # audio: at most what the next chunks still need plus one fed piece; no growth
    span = pipe.context_gen.audio_span(pipe.schedule.n_chunk(5).span).samples
    bound = (span[1] - span[0] + 2 * piece) * 4
    assert max(audio_max) <= bound, (max(audio_max), bound)
    assert max(audio_max[1000:]) == max(audio_max[20:1000])
    # the buffer really dropped the past: fed ~8 minutes, holds well under a second
    assert fed * 4 > 200 * bound
    assert np.mean(audio_max[20:]) < 16000 * 4
