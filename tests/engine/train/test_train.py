"""Training: data shapes, each loss falls after one optimiser step on a fixed tiny batch, and
``avatar train`` end to end on ``micro`` writes loadable, reproducible checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.cli import main as avatar
from engine.config import get_config
from engine.models import ModelSet
from engine.photo.crops import CROP
from engine.pipeline import Pipeline
from engine.puppet import FaceState, render
from engine.train.data import EYES, eyes_weight, make_clip, mouth_weight, reference_tensor, to_tensor
from engine.train.dit import flow_loss, sample_batch
from engine.train.latents import build_latent_set
from engine.train.sr import sr_loss
from engine.train.vae import crop_box, vae_loss
from engine.train.warp import decoder_inputs, warp_loss

pytestmark = pytest.mark.usefixtures("one_thread")
MICRO = get_config("micro")


@pytest.fixture(scope="module")
def clips() -> list:
    return [make_clip(MICRO, seed, seconds=3.0) for seed in (0, 1)]


def test_clips_are_whole_latents_of_audio_and_frames(clips: list) -> None:
    td, spf = MICRO.vae.temporal_down, MICRO.samples_per_frame
    for clip in clips:
        assert (clip.num_frames - 1) % td == 0 and clip.num_frames > 40
        assert clip.audio.dtype == np.float32 and clip.audio.size == clip.num_frames * spf
        frames = clip.frames(0, 5, MICRO.vae.height)
        assert frames.shape == (5, 32, 32, 3) and frames.dtype == np.uint8
    assert clips[0].identity != clips[1].identity
    assert not np.array_equal(clips[0].audio[:16000], clips[1].audio[:16000])
    again = make_clip(MICRO, 0, seconds=3.0)
    assert np.array_equal(again.audio, clips[0].audio) and again.identity == clips[0].identity


def test_latent_set_shapes(clips: list) -> None:
    models = ModelSet.build(MICRO, 0)
    data = build_latent_set(models.encoder, models.audio, clips)
    c, (h, w) = MICRO.vae.latent_channels, MICRO.vae.latent_hw
    for clip, lat in zip(clips, data.clips, strict=True):
        assert lat.hr.shape == (1 + (clip.num_frames - 1) // MICRO.vae.temporal_down, c, h, w)
        assert lat.ref_hr.shape == (c, h, w)
        assert lat.mel.shape[1] == MICRO.audio.mel_bins and lat.mel_start < 0
    assert data.lr(0).shape[-2:] == (h // MICRO.dit.lr_factor, w // MICRO.dit.lr_factor)


def one_step_lowers(loss_fn, params: list[torch.Tensor], lr: float = 1e-3) -> tuple[float, float]:
    """Loss before and after one Adam step, both evaluated with the same seeded noise."""
    opt = torch.optim.Adam(params, lr=lr)
    before = loss_fn()
    opt.zero_grad()
    before.backward()
    opt.step()
    with torch.no_grad():
        after = loss_fn()
    return before.item(), after.item()


def test_one_vae_step_lowers_its_loss(clips: list) -> None:
    models = ModelSet.build(MICRO, 0)
    size = MICRO.vae.height
    video = to_tensor(clips[0].frames(0, 9, size))[None]
    ref = reference_tensor(clips[0].identity, size)
    weight = mouth_weight(size, size, 3.0)[None, None, None]
    assert weight.max() == 4.0 and weight.min() == 1.0

    def loss():
        torch.manual_seed(0)
        return vae_loss(models.encoder, models.decoder, video, ref, weight)[0]

    params = list(models.encoder.parameters()) + list(models.decoder.parameters())
    before, after = one_step_lowers(loss, params)
    assert after < before, (before, after)


def test_one_warp_step_lowers_its_loss(clips: list) -> None:
    """From the encoder's latents, and from latents rebuilt through super-resolution."""
    models = ModelSet.build(MICRO, 0)
    size = MICRO.vae.height
    video = to_tensor(clips[0].frames(0, 9, size))[None].expand(2, -1, -1, -1, -1)
    ref = reference_tensor(clips[0].identity, size).expand(2, -1, -1, -1)
    weight = (mouth_weight(size, size, 3.0) + eyes_weight(size, size, 2.0))[None, None, None]
    z = decoder_inputs(models.encoder, models.sr, video, ref, torch.tensor([False, True]), 0.05,
                       torch.Generator().manual_seed(1))
    assert z.shape[:2] == (2, 3) and not torch.equal(z[0], z[1])  # the second row went through SR

    def loss():
        return warp_loss(models.decoder, z, video, ref, weight)[0]

    before, after = one_step_lowers(loss, list(models.decoder.parameters()))
    assert after < before, (before, after)


def test_the_eyes_region_holds_what_blinks_and_gaze_change() -> None:
    size = 128
    t, b, left, r = EYES
    weight = eyes_weight(size, size, 2.0)
    assert weight.max() == 2.0 and weight.min() == 0.0
    for seed in range(4):
        identity = make_clip(MICRO, seed, seconds=1.0).identity
        still = render(identity, FaceState(), size).astype(np.int16)
        for state in (FaceState(blink=1.0), FaceState(gaze_x=1.0), FaceState(gaze_x=-1.0, gaze_y=1.0)):
            changed = np.abs(render(identity, state, size).astype(np.int16) - still).max(axis=-1) > 8
            ys, xs = np.nonzero(changed)
            assert len(ys) > 0, state
            assert ys.min() >= t * size and ys.max() < b * size, (seed, state, ys.min(), ys.max())
            assert xs.min() >= left * size and xs.max() < r * size, (seed, state, xs.min(), xs.max())


def test_mouth_crops_always_hold_the_whole_mouth_region() -> None:
    rng = np.random.default_rng(0)
    t, b, left, r = (f * 256 for f in CROP)
    boxes = {crop_box(256, 128, 16, rng, mouth=True) for _ in range(200)}
    assert len(boxes) > 1
    for y, x, c in boxes:
        assert y % 16 == 0 and x % 16 == 0 and c == 128
        assert y <= t and y + c >= b and x <= left and x + c >= r, (y, x)
    anywhere = {crop_box(256, 128, 16, rng)[:2] for _ in range(300)}
    assert (0, 0) in anywhere and (128, 128) in anywhere
    assert crop_box(32, 64, 8, rng, mouth=True) == (0, 0, 32)  # a crop larger than the frame is the frame


def test_one_dit_step_lowers_its_loss_in_every_mode(clips: list) -> None:
    models = ModelSet.build(MICRO, 0)
    data = build_latent_set(models.encoder, models.audio, clips)
    params = list(models.dit.parameters()) + list(models.audio.parameters())
    for mode in ("N0", "N", "I"):
        batch = sample_batch(data, np.random.default_rng(1), 4, mode, MICRO)
        assert batch.target.shape[1] == (MICRO.schedule.chunk if mode != "I" else 4)
        assert (batch.history is not None) == (mode == "N")

        def loss(batch=batch):
            return flow_loss(models.dit, models.audio, batch, torch.Generator().manual_seed(2))

        before, after = one_step_lowers(loss, params, lr=3e-3)
        assert after < before, (mode, before, after)


def test_one_sr_step_lowers_its_loss(clips: list) -> None:
    models = ModelSet.build(MICRO, 0)
    data = build_latent_set(models.encoder, models.audio, clips)
    target = data.clips[0].hr[:8]
    ref = data.clips[0].ref_hr[None].expand(8, -1, -1, -1)

    def loss():
        return sr_loss(models.sr, target, ref, torch.Generator().manual_seed(3))

    before, after = one_step_lowers(loss, list(models.sr.parameters()), lr=3e-3)
    assert after < before, (before, after)


def train(out: Path) -> None:
    args = ["train", "--config", "micro", "--out", str(out), "--clips", "2", "--vae-steps", "3",
            "--dit-steps", "3", "--sr-steps", "3", "--warp-steps", "3", "--reader-steps", "3",
            "--reader-identities", "3", "--threads", "1",
            "--seed", "5"]
    assert avatar(args) == 0


def test_avatar_train_writes_reproducible_loadable_checkpoints(tmp_path: Path) -> None:
    train(tmp_path / "a" / "micro")
    train(tmp_path / "b" / "micro")
    names = ("audio", "encoder", "dit", "sr", "decoder", "motion_reader")
    for name in names:
        a = load_file(tmp_path / "a" / "micro" / f"{name}.safetensors")
        b = load_file(tmp_path / "b" / "micro" / f"{name}.safetensors")
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name} differs between two runs with one seed"
    card = json.loads((tmp_path / "a" / "micro" / "model_card.json").read_text())
    assert set(card["stages"]) == {"vae", "latents", "dit", "sr", "reader"}  # warp is asked for by name
    assert card["stages"]["dit"]["steps"] == 3 and card["stages"]["vae"]["final_l1"] > 0
    fresh = Pipeline.from_config("micro")
    trained = Pipeline.from_config("micro", weights=tmp_path / "a" / "micro")
    assert sorted(trained.weights_loaded) == sorted(n for n in names if n != "motion_reader")
    assert not torch.equal(trained.models.decoder.out.weight, fresh.models.decoder.out.weight)
    loaded = load_file(tmp_path / "a" / "micro" / "decoder.safetensors")
    assert torch.equal(trained.models.decoder.out.weight, loaded["out.weight"])
    frames = list(trained.render(np.zeros(16000, np.float32), avatar="ada"))
    assert len(frames) == 25 and frames[0].rgb.shape == (32, 32, 3)
    # Training continued on the same folder: the card keeps the earlier run and sums the time.
    assert avatar(["train", "--config", "micro", "--out", str(tmp_path / "a" / "micro"), "--clips", "2",
                   "--stages", "vae,dit,warp", "--vae-steps", "2", "--dit-steps", "2", "--warp-steps", "2",
                   "--warp-crop", "16", "--threads", "1"]) == 0
    again = json.loads((tmp_path / "a" / "micro" / "model_card.json").read_text())
    for stage in ("vae", "dit"):
        entry = again["stages"][stage]
        assert entry["steps"] == 2 and entry["continued_from"] == card["stages"][stage]
        assert entry["seconds"] >= card["stages"][stage]["seconds"]
    assert again["stages"]["sr"] == card["stages"]["sr"]
    # the decoder learnt to warp its reference: the saved one mixes the warped reference in
    assert again["stages"]["warp"]["steps"] == 2 and again["stages"]["warp"]["crop"] == 16
    assert "continued_from" not in again["stages"]["warp"]
    warped = load_file(tmp_path / "a" / "micro" / "decoder.safetensors")
    assert warped["warp_on"].item() == 1.0 and loaded["warp_on"].item() == 0.0
    assert not torch.equal(warped["warp.2.weight"], loaded["warp.2.weight"])


@pytest.mark.parametrize("lookahead_ms", [None, 20, 0])
def test_training_cuts_the_audio_windows_inference_cuts(clips: list, lookahead_ms: int | None) -> None:
    """The same latent reads the same mel window in training and in ContextGen, and the window
    reaches ``lookahead_ms`` past the latent's own audio (plus the last mel frame's overhang,
    n_fft / 2 - hop samples)."""
    import dataclasses

    from engine.modules.audio_encoder import AudioEncoder
    from engine.stages.context_gen import ContextGen, ContextRequest
    from engine.train.dit import mel_windows

    config = dataclasses.replace(MICRO, audio=dataclasses.replace(MICRO.audio, lookahead_ms=lookahead_ms))
    models = ModelSet.build(config, 0)
    data = build_latent_set(models.encoder, models.audio, clips[:1])
    gen = ContextGen(config, models.audio)
    lo, hi = 5, 7
    span = gen.audio_span((lo, hi))
    last_frame_end = (config.vae.temporal_down * (hi - 1) + 1) * config.samples_per_frame
    ahead = config.audio.context_ms if lookahead_ms is None else lookahead_ms
    assert span.samples[1] - last_frame_end == ahead * 16 + config.audio.n_fft // 2 - config.audio.hop
    assert span.samples[1] - last_frame_end == AudioEncoder.lookahead_samples(config)
    assert span.samples[1] - span.samples[0] == gen.audio_span((0, 2)).samples[1] - gen.audio_span((0, 2)).samples[0]
    audio = torch.from_numpy(clips[0].audio[span.samples[0]:span.samples[1]].copy())
    served = gen(ContextRequest((lo, hi), audio.numpy(), seed=0, guided=False)).audio_tokens
    clip = data.clips[0]
    with torch.no_grad():
        trained = models.audio(mel_windows(clip.mel, clip.mel_start, lo, hi, config)[None])
    torch.testing.assert_close(trained, served, atol=1e-5, rtol=1e-4)


def test_dit_batches_take_every_chunk_length_the_schedules_use(clips: list) -> None:
    from engine.train.dit import train_chunks

    models = ModelSet.build(MICRO, 0)
    data = build_latent_set(models.encoder, models.audio, clips[:1])
    assert train_chunks(MICRO) == tuple(range(1, MICRO.schedule.chunk + 1))
    for chunk in train_chunks(MICRO):
        batch = sample_batch(data, np.random.default_rng(0), 2, "N", MICRO, chunk)
        assert batch.target.shape[1] == batch.target_mel.shape[1] == chunk
        assert batch.history.shape[1] == MICRO.dit.window
