"""The latent motion reader: its inputs (a latent, the ones before it, the reference), loading, and
its output as face states."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.photo.latent_reader import CONTEXT, LatentMotionReader, load_latent_reader, stack_inputs, to_states
from engine.photo.reader import OUTPUTS, SCALES
from engine.train.frame_readers import save_weights


def test_each_latent_is_read_beside_the_ones_before_it_newest_first_and_the_reference() -> None:
    c = 8
    latents = torch.arange(3, dtype=torch.float32)[:, None, None, None].expand(3, c, 2, 2) + 10  # 10, 11, 12
    before = torch.tensor([-2.0, -1.0])[:, None, None, None].expand(CONTEXT, c, 2, 2)
    reference = torch.full((c, 2, 2), 99.0)
    x = stack_inputs(latents, before, reference)
    assert x.shape == (3, (CONTEXT + 2) * c, 2, 2)
    firsts = x[:, ::c, 0, 0].tolist()  # the first channel of each stacked latent
    assert firsts == [[10, -1, -2, 99], [11, 10, -1, 99], [12, 11, 10, 99]]


def test_no_weights_means_no_reader(tmp_path: Path) -> None:
    assert load_latent_reader(tmp_path / "absent.safetensors") is None


def test_a_saved_reader_loads_with_its_shapes_and_reads_the_same(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = LatentMotionReader(channels=8, frames=4)
    x = torch.randn(5, (CONTEXT + 2) * 8, 8, 8)
    with torch.no_grad():
        want = net(x)
    path = tmp_path / "latent_reader.safetensors"
    save_weights(net, path, {})
    loaded = load_latent_reader(path)
    assert loaded is not None and loaded.frames == 4
    with torch.no_grad():
        assert torch.allclose(loaded(x), want)
    assert want.shape == (5, 4, len(OUTPUTS))


def test_outputs_become_face_states_at_their_scales() -> None:
    values = torch.zeros(2, len(OUTPUTS))
    values[0, 0] = 0.5  # openness
    values[1, [i for i, (n, _) in enumerate(OUTPUTS) if n == "yaw"][0]] = 1.0
    first, second = to_states(values)
    assert first.openness == pytest.approx(0.5)
    assert second.yaw == pytest.approx(float(SCALES[[n for n, _ in OUTPUTS].index("yaw")]))


def test_the_jump_into_each_latent_is_spread_over_its_frames_but_the_mouths() -> None:
    from engine.photo.latent_reader import MOUTH, continuous

    # two latents of four frames, every output moving 0.1 a frame, the second latent read 0.5 too high
    ramp = torch.tensor([[0.0, 0.1, 0.2, 0.3], [0.9, 1.0, 1.1, 1.2]])
    values = ramp[..., None].expand(-1, -1, len(OUTPUTS))
    yaw, mouth = [name for name, _ in OUTPUTS].index("yaw"), [name for name, _ in OUTPUTS].index(MOUTH[0])
    out, last = continuous(values, range(8), None)
    steps = torch.diff(out[..., yaw].reshape(-1))
    assert torch.allclose(out[0], values[0])  # nothing shown before it: read as is
    assert torch.allclose(steps[3:], torch.full((4,), 0.1 + 0.5 / 4))  # the jump spread evenly
    assert torch.allclose(out[..., mouth], ramp)  # the lips as read
    assert torch.allclose(out[1, -1], values[1, -1]) and torch.equal(last, out[1, -1])
    again, _ = continuous(values[1:], range(4), values[0, -1])  # chunk by chunk: the same
    assert torch.allclose(again[0], out[1])
    smooth = torch.tensor([[0.4, 0.5, 0.6, 0.7]])[..., None].expand(-1, -1, len(OUTPUTS))
    unchanged, _ = continuous(smooth, range(4), torch.full((len(OUTPUTS),), 0.3))
    assert torch.allclose(unchanged, smooth)  # a smooth read is left alone
