"""SR and the decoder on a device of their own (here the same CPU, through the same code path):
each chunk is decoded on the decoder's thread while the next one denoises. Frames, float video
and latents are the one-device pipeline's; a step returns the frames of the chunk before it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from parallel_helpers import assert_same_run, run_sessions

from engine.bench import speech_like
from engine.parallel.build import build_pipeline
from engine.parallel.disaggregate import DisaggregatedPipeline
from engine.parallel.plan import ParallelPlan
from engine.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def split(micro_weights: Path) -> DisaggregatedPipeline:
    pipe = build_pipeline(ParallelPlan(decoder_device="cpu"), name="micro", weights=str(micro_weights),
                          guidance=2.0)
    assert isinstance(pipe, DisaggregatedPipeline) and pipe.decoder_device == "cpu"
    return pipe


def test_frames_equal_one_device(split: DisaggregatedPipeline, micro_weights: Path, monkeypatch) -> None:
    plain = Pipeline.from_config("micro", weights=str(micro_weights), guidance=2.0)
    assert_same_run(run_sessions(split, monkeypatch), run_sessions(plain, monkeypatch))


def counts(pipe, monkeypatch, slow_decode: float = 0.0) -> tuple[list[int], list[tuple[str, float, float]]]:
    """Frames returned by each step of one session; when each decode and A2V call ran, on which thread."""
    spans: list[tuple[str, float, float]] = []
    step, a2v = pipe.models.decoder.step, pipe.a2v

    def timed(name: str, fn, *args: object) -> object:
        started = time.perf_counter()
        if name == "decode":
            time.sleep(slow_decode)
        out = fn(*args)
        spans.append((f"{name}@{threading.current_thread().name}", started, time.perf_counter()))
        return out

    monkeypatch.setattr(pipe.models.decoder, "step", lambda *a: timed("decode", step, *a))
    monkeypatch.setattr(pipe, "a2v", lambda *a: timed("a2v", a2v, *a))
    session = pipe.open_session(avatar="ada")
    session.feed(speech_like(3.0, 16000))
    session.close_input()
    out, indices = [], []
    while not session.finished:
        frames = session.step()
        out.append(len(frames))
        indices += [f.index for f in frames]
    assert indices == list(range(75))  # every frame once, in order
    return out, spans


def test_a_chunk_decodes_on_the_decoder_thread_while_the_next_denoises(split: DisaggregatedPipeline,
                                                                       micro_weights: Path, monkeypatch) -> None:
    plain = Pipeline.from_config("micro", weights=str(micro_weights), guidance=2.0)
    want, _ = counts(plain, monkeypatch)
    got, spans = counts(split, monkeypatch, slow_decode=0.2)  # far longer than a micro chunk denoises
    first = next(i for i, n in enumerate(want) if n)
    assert got[:first + 1] == want[:first + 1]  # the first frames are waited for
    assert got[first + 1] == 0 and got[first + 2:-1] == want[first + 1:-2]  # then each step the step before's
    assert got[-1] == want[-2] + want[-1]  # and the end of the stream everything left
    decodes = [(name, a, b) for name, a, b in spans if name.startswith("decode@")]
    assert len(decodes) >= sum(1 for n in want if n)
    # on the decoder's thread, but the end of the stream's (in place, after the rest)
    assert [name for name, _, _ in decodes] == ["decode@avatar-decode_0"] * (len(decodes) - 1) + ["decode@MainThread"]
    denoising = [(a, b) for name, a, b in spans if name == "a2v@MainThread"]
    overlapped = sum(1 for _, a, b in decodes[:-1] if any(x < b and y > a for x, y in denoising))
    # the DiT denoised the next chunk meanwhile (on a quiet machine every time but the first and
    # last chunks'; a loaded CI box may run a decode alone now and then)
    assert len(decodes) > 2 and overlapped >= 1
