"""Temporal deblocking: what it does at latent-group edges, that it leaves the rest alone,
that streaming it chunk by chunk equals filtering the whole video, and that it is what the
decode stage publishes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_engine_vae import decoder, fresh, latents

from engine.config import get_config
from engine.eval.metrics import seam_ratio
from engine.modules.vae import latent_frames
from engine.pipeline import Pipeline
from engine.stages.deblock import temporal_deblock
from engine.stages.decode_publish import DecodeAndPublish, DecodeInput, frame_span, to_uint8

pytestmark = pytest.mark.usefixtures("one_thread")
TD = 4
WEIGHTS = (0.3, 0.1)


def staircase(groups: int, seed: int = 0) -> torch.Tensor:
    """Stop-motion video: a new random picture at every latent group, a faint drift inside
    groups: the judder the filter is for. 1 + groups * TD frames of (3, 8, 8)."""
    g = torch.Generator().manual_seed(seed)
    steps = torch.rand(groups + 1, 3, 8, 8, generator=g) * 2 - 1
    frames = [steps[0]]
    for k in range(1, groups + 1):
        frames += [steps[k] + 0.01 * j for j in range(TD)]
    return torch.stack(frames)


def group_starts(groups: int) -> list[int]:
    """The first frame of each latent after the first (latent 0 is frame 0 alone)."""
    return [latent_frames(g, TD)[0] for g in range(1, groups + 1)]


def test_group_edges_carry_a_decaying_share_of_the_jump() -> None:
    video = staircase(6)
    before = video.clone()
    out, last = temporal_deblock(video, 0, None, WEIGHTS, TD)
    assert torch.equal(video, before)  # pure
    assert torch.equal(out[0], video[0])  # nothing before the stream's first frame
    for s in group_starts(6):
        jump = out[s - 1] - video[s]
        assert torch.allclose(out[s], video[s] + 0.3 * jump, atol=1e-6)
        assert torch.allclose(out[s + 1], video[s + 1] + 0.1 * jump, atol=1e-6)
        assert torch.equal(out[s + 2], video[s + 2]) and torch.equal(out[s + 3], video[s + 3])
    assert torch.equal(last, out[-1])
    as_uint8 = [to_uint8(v) for v in (video, out)]
    raw, eased = (seam_ratio(v, group_starts(6)) for v in as_uint8)
    assert raw > 5 and eased < 0.75 * raw, (raw, eased)


def test_streaming_equals_filtering_the_whole_video() -> None:
    """Cut into runs of whole latents, as the engine decodes them (10 latents here)."""
    video = staircase(9, seed=3)
    whole, whole_last = temporal_deblock(video, 0, None, WEIGHTS, TD)
    for cuts in ([1, 4, 7], [2, 3, 6, 8], [1, 2, 3, 9]):
        parts, last, at = [], None, 0
        for cut in [*cuts, 10]:
            f0, f1 = frame_span(at, cut - at, TD)
            part, last = temporal_deblock(video[f0:f1], at, last, WEIGHTS, TD)
            parts.append(part)
            at = cut
        assert torch.allclose(torch.cat(parts), whole, atol=1e-6), cuts
        assert torch.allclose(last, whole_last)


def test_no_weights_is_the_identity() -> None:
    video = staircase(3)
    for weights in ((), (0.0, 0.0)):
        out, last = temporal_deblock(video, 0, None, weights, TD)
        assert torch.equal(out, video) and torch.equal(last, video[-1])
    empty, kept = temporal_deblock(video[:0], 13, video[0], WEIGHTS, TD)
    assert empty.shape[0] == 0 and torch.equal(kept, video[0])


@pytest.mark.parametrize("bad", [(0.3, 0.1, 0.0, 0.0, 0.0), (1.0,), (-0.1,)])
def test_config_rejects_bad_weights(bad: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="deblock"):
        get_config("micro").replace(deblock=bad)


def test_config_json_round_trip_keeps_the_weights() -> None:
    config = get_config("micro").replace(deblock=(0.25,))
    assert type(config).from_json(config.to_json()) == config


def test_the_bundled_weights_load_with_deblocking_off() -> None:
    pipe = Pipeline.from_config("tiny", deblock=())
    assert pipe.config.deblock == () and pipe.decode.deblock == ()
    assert sorted(pipe.weights_loaded) == ["audio", "decoder", "dit", "encoder", "sr"]


def test_decode_stage_publishes_deblocked_frames_and_carries_the_last_one() -> None:
    """Real decoder, three calls: the published frames equal the decoder's frames filtered
    as one video, and with the filter off they are the decoder's own."""
    dec = decoder("micro")
    config = dec.config
    td = config.vae.temporal_down
    spf = config.samples_per_frame
    z = latents(dec, 7, seed=2)[0]
    with torch.inference_mode():
        raw, _ = dec.step(z[None], fresh(dec))
    expected = to_uint8(temporal_deblock(raw[0], 0, None, WEIGHTS, td)[0])
    for weights, want in ((WEIGHTS, expected), ((), to_uint8(raw[0]))):
        stage = DecodeAndPublish(dec, config.fps, config.audio.sample_rate, weights)
        cache, last, frames, at = fresh(dec), None, [], 0
        for size in (3, 2, 2):
            f0, f1 = frame_span(at, size, td)
            audio = np.zeros((f1 - f0) * spf, dtype=np.float32)
            out = stage(DecodeInput(z[None, at:at + size], (at,), cache, (audio,), (None,), (("N0",) * size,), (last,)))
            cache, (last,) = out.cache, out.last
            frames += out.frames[0]
            at += size
        got = np.stack([f.rgb for f in frames])
        assert [f.index for f in frames] == list(range(len(want)))
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert not np.array_equal(expected, to_uint8(raw[0]))
