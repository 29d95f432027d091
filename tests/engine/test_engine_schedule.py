"""N/I chunk schedule: order, exactly-once timeline publishing, I-chunk seam replacement.

Pure schedule checks first, then the same properties observed on a running ``micro``
pipeline (frames, timestamps, audio, which chunk produced each frame, latents before
and after each I chunk, and the ``interp=False`` comparison).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from engine.config import ScheduleConfig
from engine.pipeline import Pipeline
from engine.schedule import ChunkSchedule

pytestmark = pytest.mark.usefixtures("one_thread")

SCHEDULES = [
    ScheduleConfig(chunk=3, seam=1, anchor=1),
    ScheduleConfig(chunk=4, seam=1, anchor=1),
    ScheduleConfig(chunk=5, seam=2, anchor=1),
    ScheduleConfig(chunk=6, seam=1, anchor=2),
    ScheduleConfig(chunk=7, seam=2, anchor=3),
]
# (schedule, interp) pairs: every schedule above with I chunks on and off, and the low-latency
# schedules of one and two latents a chunk, which have no room for I chunks.
LAYOUTS = [(cfg, interp) for cfg in SCHEDULES for interp in (True, False)] + [
    (ScheduleConfig(chunk=c, seam=1, anchor=1, interp=False), False) for c in (1, 2)]


def layout_id(layout: tuple[ScheduleConfig, bool]) -> str:
    cfg, interp = layout
    return f"C{cfg.chunk}s{cfg.seam}a{cfg.anchor}-{'interp' if interp else 'no-interp'}"
SPF = 640  # samples per video frame at 16 kHz, 25 fps


def expected_names(n_chunks: int) -> list[str]:
    names = ["N0"] if n_chunks else []
    for k in range(1, n_chunks):
        names += [f"N{k}", f"I{k - 1}"]
    return names


# --- the schedule as pure functions ---------------------------------------------------------


def test_order_is_n0_n1_i0_n2_i1() -> None:
    sched = ChunkSchedule(ScheduleConfig(chunk=4, seam=1, anchor=1))
    assert [p.name for p in sched.order(5)] == ["N0", "N1", "I0", "N2", "I1", "N3", "I2", "N4", "I3"]
    for n in range(0, 9):
        assert [p.name for p in sched.order(n)] == expected_names(n)
    off = ChunkSchedule(ScheduleConfig(chunk=4, seam=1, anchor=1, interp=False))
    assert [p.name for p in off.order(4)] == ["N0", "N1", "N2", "N3"]


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_every_latent_published_once_in_timeline_order(layout: tuple[ScheduleConfig, bool]) -> None:
    cfg, interp = layout
    cfg = ScheduleConfig(cfg.chunk, cfg.seam, cfg.anchor, interp)
    sched = ChunkSchedule(cfg)
    for n in range(1, 9):
        count = np.zeros(n * cfg.chunk, dtype=int)
        position = 0
        for plan in sched.order(n):
            lo, hi = plan.publish
            assert lo == position, f"{plan.name} publishes from {lo}, expected {position}"
            assert hi >= lo
            count[lo:hi] += 1
            position = hi
        lo, hi = sched.tail(n - 1)
        assert (lo, hi) == (position, n * cfg.chunk)
        count[lo:hi] += 1
        assert (count == 1).all(), f"n={n}: publish counts {count.tolist()}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_publishing_is_final_and_never_late(layout: tuple[ScheduleConfig, bool]) -> None:
    """After each chunk, exactly the longest prefix of latents that nothing later will
    regenerate has been published: nothing early (no later chunk rewrites it), nothing late."""
    cfg, interp = layout
    cfg = ScheduleConfig(cfg.chunk, cfg.seam, cfg.anchor, interp)
    plans = ChunkSchedule(cfg).order(10)  # a stream that goes on past the checked prefix
    published = 0
    for i, plan in enumerate(plans):
        if plan.kind == "N" and plan.index >= 7:
            break
        generated = set().union(*(range(*p.generate) for p in plans[: i + 1]))
        rewritten_later = set().union(*(range(*p.generate) for p in plans[i + 1:]))
        settled = 0
        while settled in generated and settled not in rewritten_later:
            settled += 1
        published = max(published, plan.publish[1])
        assert published == settled, f"after {plan.name}: published {published}, settled {settled}"


@pytest.mark.parametrize("cfg", SCHEDULES, ids=lambda c: f"C{c.chunk}s{c.seam}a{c.anchor}")
def test_i_chunk_spans_anchors_and_generated_range(cfg: ScheduleConfig) -> None:
    sched = ChunkSchedule(cfg)
    c, s, a = cfg.chunk, cfg.seam, cfg.anchor
    for k in range(6):
        n_k, n_next, i_k = sched.n_chunk(k), sched.n_chunk(k + 1), sched.i_chunk(k)
        b = (k + 1) * c
        assert (n_k.span, n_k.generate) == ((k * c, b), (k * c, b))
        assert n_next.span[0] == b
        assert i_k.span == (b - s - a, b + s + a)
        assert i_k.generate == (b - s, b + s)
        left, right = i_k.anchors
        assert left == (b - s - a, b - s) and right == (b + s, b + s + a)
        # left anchors are N_k's last frames, right anchors N_{k+1}'s early frames
        assert n_k.span[0] <= left[0] and left[1] <= n_k.span[1]
        assert n_next.span[0] <= right[0] and right[1] <= n_next.span[1]
        # the seam straddles the boundary and lies inside N_k followed by N_{k+1}
        assert i_k.generate[0] < b < i_k.generate[1]
        # it publishes the seam and N_{k+1}'s middle, up to the next seam
        assert i_k.publish == (b - s, b + c - s)
        assert i_k.publish[1] == sched.i_chunk(k + 1).generate[0]


def test_interp_off_publishes_whole_n_chunks() -> None:
    cfg = ScheduleConfig(chunk=4, seam=1, anchor=1, interp=False)
    sched = ChunkSchedule(cfg)
    for k in range(5):
        plan = sched.n_chunk(k)
        assert plan.publish == plan.generate == plan.span == (4 * k, 4 * k + 4)
    assert sched.tail(4) == (20, 20)
    with pytest.raises(ValueError):
        sched.i_chunk(0)


def test_schedule_config_validation() -> None:
    with pytest.raises(ValueError):
        ScheduleConfig(chunk=3, seam=2, anchor=1)  # 2*seam + anchor > chunk
    with pytest.raises(ValueError):
        ScheduleConfig(chunk=0)
    with pytest.raises(ValueError):
        ScheduleConfig(chunk=4, seam=0, anchor=1)  # interpolation needs a seam
    assert not ScheduleConfig(chunk=3, seam=2, anchor=1, interp=False).interp


# --- the schedule as run by the pipeline --------------------------------------------------------


def frame_latent(n: int, td: int) -> int:
    """The latent covering video frame n: latent 0 covers frame 0, later ones td frames each."""
    return 0 if n == 0 else (n - 1) // td + 1


def expected_chunk(n: int, frames: int, pipe: Pipeline) -> str:
    """Which chunk must produce frame n of a stream of ``frames`` frames."""
    cfg = pipe.config
    c, s, td = cfg.schedule.chunk, cfg.schedule.seam, cfg.vae.temporal_down
    g = frame_latent(n, td)
    if cfg.schedule.interp:
        total_latents = 1 + math.ceil((frames - 1) / td)
        n_chunks = math.ceil(total_latents / c)
        k = (g + s) // c - 1  # nearest boundary b = (k+1)c with b - s <= g < b + s
        if k >= 0 and (k + 1) * c - s <= g < (k + 1) * c + s and k + 1 < n_chunks:
            return f"I{k}"
    return f"N{g // c}"


def check_frames(frames: list, pcm: np.ndarray, pipe: Pipeline) -> None:
    n = math.ceil(pcm.size / SPF)
    assert [f.index for f in frames] == list(range(n))
    pts = [f.pts for f in frames]
    assert all(a < b for a, b in zip(pts, pts[1:], strict=False))
    assert pts == [Fraction(i, 25) for i in range(n)]
    padded = np.zeros(n * SPF, np.float32)
    padded[: pcm.size] = pcm
    h, w = pipe.frame_size
    for f in frames:
        assert f.sample_index == f.index * SPF
        assert f.audio.dtype == np.float32
        np.testing.assert_array_equal(f.audio, padded[f.index * SPF:(f.index + 1) * SPF])
        assert f.rgb.shape == (h, w, 3) and f.rgb.dtype == np.uint8
        assert f.chunk == expected_chunk(f.index, n, pipe), f"frame {f.index}"


@pytest.mark.parametrize("samples", [1, 640, 641, 8 * 640, 13 * 640 - 5, 37 * 640, 3 * 16000 + 123])
def test_render_publishes_each_frame_once_with_its_audio(micro_pipe, micro_pipe_nointerp, speech,
                                                         samples: int) -> None:
    pcm = speech(samples / 16000 + 0.01, seed=samples)[:samples]
    assert pcm.size == samples
    for pipe in (micro_pipe, micro_pipe_nointerp):
        frames = list(pipe.render(pcm, seed=1))
        check_frames(frames, pcm, pipe)
        n_frames = math.ceil(samples / SPF)
        n_chunks = math.ceil((1 + math.ceil((n_frames - 1) / 4)) / pipe.config.schedule.chunk)
        seams = pipe.config.schedule.interp and n_chunks >= 2
        assert {f.chunk[0] for f in frames} == ({"N", "I"} if seams else {"N"})


def test_empty_stream_publishes_nothing(micro_pipe) -> None:
    assert list(micro_pipe.render(np.zeros(0, np.float32))) == []


def run_recording(pipe: Pipeline, pcm: np.ndarray, seed: int, inputs: list | None = None) -> tuple[list, list]:
    """Step a session by hand; after every chunk (before it releases anything) record
    the latent window (start, values, origins) it holds. With ``inputs``, also collect
    what the AudioToVideo stage was given for each chunk."""
    session = pipe.open_session(seed=seed)
    if inputs is not None:
        a2v = pipe.a2v

        class Spy:
            def __call__(self, inp):  # noqa: ANN001, ANN204
                inputs.append(inp)
                return a2v(inp)

        pipe.a2v = Spy()
    session.feed(pcm)
    session.close_input()
    box: list = []
    release = session.release_spent

    def spy() -> None:
        w = session.state.latents
        box.append((w.start, w.data.clone(), w.origin))
        release()

    session.release_spent = spy
    records, frames = [], []
    try:
        while not session.finished:
            box.clear()
            frames += session.step()
            if box:
                records.append((session.last_chunk, *box[0]))
    finally:
        if inputs is not None:
            pipe.a2v = a2v
    return records, frames


def test_i_chunk_replaces_exactly_the_seam(micro_pipe, speech) -> None:
    cfg = micro_pipe.config.schedule
    c, s, a = cfg.chunk, cfg.seam, cfg.anchor
    pcm = speech(4.0, seed=5)
    inputs: list = []
    records, frames = run_recording(micro_pipe, pcm, seed=3, inputs=inputs)
    check_frames(frames, pcm, micro_pipe)
    names = [r[0] for r in records]
    n_chunks = sum(name[0] == "N" for name in names)
    assert names == expected_names(n_chunks)
    assert [inp.plan.name for inp in inputs] == names
    window = micro_pipe.config.dit.window
    for inp in inputs:
        k = inp.plan.index
        if inp.plan.kind == "N":
            # N_k is conditioned on the boundary (last) frames of N_{k-1}, nothing older
            assert inp.anchors is None
            expect = [] if k == 0 else list(range(max(0, k * c - window), k * c))
            assert (inp.history.frames() if inp.history is not None else []) == expect
    checked = 0
    for i, (name, start, data, origin) in enumerate(records):
        if name[0] != "I":
            continue
        k = int(name[1:])
        b = (k + 1) * c
        prev_name, prev_start, prev_data, prev_origin = records[i - 1]
        assert prev_name == f"N{k + 1}"
        # before the I chunk: the whole I span is held, produced by N_k and N_{k+1}
        assert prev_start <= b - s - a and prev_start + len(prev_data) >= b + s + a
        for g in range(b - s - a, b + s + a):
            assert prev_origin[g - prev_start] == (f"N{k}" if g < b else f"N{k + 1}")
        # its anchors are N_k's last and N_{k+1}'s first latents, exactly as they were
        inp = inputs[i]
        assert inp.plan.name == name
        assert torch.equal(inp.anchors[0, :a], prev_data[b - s - a - prev_start:b - s - prev_start])
        assert torch.equal(inp.anchors[0, -a:], prev_data[b + s - prev_start:b + s + a - prev_start])
        common = range(max(start, prev_start), min(start + len(data), prev_start + len(prev_data)))
        assert set(range(b - s - a, b + s + a)) <= set(common)
        for g in common:
            before, after = prev_data[g - prev_start], data[g - start]
            if b - s <= g < b + s:
                assert origin[g - start] == name
                assert (after - before).abs().max() > 1e-3, f"{name} left seam latent {g} unchanged"
            else:
                assert origin[g - start] == prev_origin[g - prev_start]
                assert torch.equal(after, before), f"{name} changed latent {g} outside its seam"
        checked += 1
    assert checked == n_chunks - 1 >= 3


def test_no_interp_keeps_the_n_chunks_identical(micro_pipe, micro_pipe_nointerp, speech) -> None:
    c, s = micro_pipe.config.schedule.chunk, micro_pipe.config.schedule.seam
    pcm = speech(3.0, seed=9)

    def latents(records: list, n_only: bool) -> dict[int, torch.Tensor]:
        """Each latent's value: its N-chunk version (n_only) or its final version."""
        out: dict[int, torch.Tensor] = {}
        for _, start, data, origin in records:
            for j in range(len(data)):
                if not n_only or origin[j][0] == "N":
                    if not n_only or start + j not in out:
                        out[start + j] = data[j]
        return out

    rec_on, _ = run_recording(micro_pipe, pcm, seed=4)
    rec_off, _ = run_recording(micro_pipe_nointerp, pcm, seed=4)
    assert all(r[0][0] == "N" for r in rec_off)
    n_on, n_off = latents(rec_on, True), latents(rec_off, True)
    assert sorted(n_on) == sorted(n_off) == list(range(len(n_off)))
    for g in n_off:
        assert torch.equal(n_on[g], n_off[g]), f"N-chunk latent {g} differs with interp on"
    final_on, final_off = latents(rec_on, False), latents(rec_off, False)
    total = len(n_off)
    seams = {g for k in range(total // c - 1) for g in range((k + 1) * c - s, (k + 1) * c + s)}
    assert seams and max(seams) < total
    for g in range(total):
        same = torch.equal(final_on[g], final_off[g])
        assert same != (g in seams), f"latent {g}: seam={g in seams} but identical={same}"
