"""Causal video VAE: streaming decode equals whole-sequence decode; time layout rules."""

from __future__ import annotations

import pytest
import torch
from conftest import enliven

from engine.config import get_config
from engine.modules.vae import DecoderCache, DecoderReference, VAEDecoder, VAEEncoder, latent_count, latent_frames
from engine.stages.decode_publish import frame_span

pytestmark = pytest.mark.usefixtures("one_thread")


def decoder(name: str, seed: int = 0) -> VAEDecoder:
    torch.manual_seed(seed)
    return enliven(VAEDecoder(get_config(name)), seed + 1).eval()


def latents(dec: VAEDecoder, count: int, seed: int) -> torch.Tensor:
    v = dec.config.vae
    return 2 * torch.randn(1, count, v.latent_channels, *v.latent_hw, generator=torch.Generator().manual_seed(seed))


def reference(dec: VAEDecoder, seed: int = 7) -> DecoderReference:
    v = dec.config.vae
    image = torch.rand(1, 3, v.height, v.width, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    with torch.inference_mode():
        return dec.reference(image)


def fresh(dec: VAEDecoder) -> DecoderCache:
    return dec.init_cache(reference(dec))


def decode_in_chunks(dec: VAEDecoder, z: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, list[int]]:
    cache = fresh(dec)
    parts, counts, at = [], [], 0
    with torch.inference_mode():
        for size in sizes:
            frames, cache = dec.step(z[:, at:at + size], cache)
            parts.append(frames)
            counts.append(frames.shape[1])
            at += size
    assert at == z.shape[1]
    return torch.cat(parts, dim=1), counts


def split(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


@pytest.mark.parametrize("name,sizes", [("micro", [1, 2, 3, 4, 5, 13]), ("tiny", [1, 3])])
def test_streaming_decode_equals_whole_sequence(name: str, sizes: list[int]) -> None:
    dec = decoder(name)
    assert dec.dtype == torch.float32
    td = dec.config.vae.temporal_down
    total = 13
    z = latents(dec, total, seed=1)
    with torch.inference_mode():
        whole, cache = dec.step(z, fresh(dec))
    v = dec.config.vae
    assert whole.shape == (1, 1 + td * (total - 1), 3, v.height, v.width)
    assert cache.started and whole.std() > 0.01  # not a flat picture
    schedules = [split(total, size) for size in sizes] + [[1, 2, 3, 1, 4, 2]]
    for chunks in schedules:
        streamed, counts = decode_in_chunks(dec, z, chunks)
        # the first latent covers one frame, every later latent td frames
        assert counts == [1 + td * (chunks[0] - 1)] + [td * n for n in chunks[1:]]
        assert streamed.shape == whole.shape
        diff = (streamed - whole).abs().max().item()
        assert diff < 1e-4, f"chunks {chunks}: max abs diff {diff}"


def test_the_causal_cache_is_what_makes_streaming_exact() -> None:
    dec = decoder("micro", seed=3)
    z = latents(dec, 6, seed=2)
    with torch.inference_mode():
        whole, _ = dec.step(z, fresh(dec))
        first, cache = dec.step(z[:, :3], fresh(dec))
        zeros = tuple(torch.zeros_like(t) for t in cache.prev)
        forgetful = DecoderCache(zeros, started=True, reference=cache.reference)
        wrong, _ = dec.step(z[:, 3:], forgetful)
        # a later latent never changes frames already decoded (causality)
        changed = z.clone()
        changed[:, 4:] += 1.0
        again, _ = dec.step(changed, fresh(dec))
    n_first = first.shape[1]
    assert (wrong - whole[:, n_first:]).abs().max() > 1e-3
    end_of_latent3 = latent_frames(3, 4)[1]
    assert torch.equal(again[:, :end_of_latent3], whole[:, :end_of_latent3])
    assert (again[:, end_of_latent3:] - whole[:, end_of_latent3:]).abs().max() > 1e-3
    assert 1 + 4 * 2 == n_first


def test_every_frame_sees_the_reference() -> None:
    """The reference features reach every decoded frame, and only through the cache."""
    dec = decoder("micro", seed=4)
    z = latents(dec, 4, seed=5)
    with torch.inference_mode():
        a, _ = dec.step(z, dec.init_cache(reference(dec, seed=1)))
        b, _ = dec.step(z, dec.init_cache(reference(dec, seed=2)))
        again, _ = dec.step(z, dec.init_cache(reference(dec, seed=1)))
    assert torch.equal(a, again)
    per_frame = (a - b).abs().flatten(2).amax(dim=2)[0]
    assert (per_frame > 1e-3).all(), per_frame


def test_decoder_cache_size_is_fixed() -> None:
    dec = decoder("micro")
    cache = fresh(dec)
    size = cache.nbytes()
    with torch.inference_mode():
        for n in (1, 3, 7):
            _, cache = dec.step(latents(dec, n, seed=n), cache)
            assert cache.nbytes() == size


@pytest.mark.parametrize("name", ["micro", "tiny"])
def test_encoder_latent_count_and_bad_lengths(name: str) -> None:
    cfg = get_config(name)
    torch.manual_seed(0)
    enc = VAEEncoder(cfg).eval()
    v = cfg.vae
    td = v.temporal_down
    h, w = v.latent_hw
    gen = torch.Generator().manual_seed(1)
    ref = torch.rand(2, 3, v.height, v.width, generator=gen) * 2 - 1
    for k in (0, 1, 2) if name == "tiny" else (0, 1, 2, 5):
        video = torch.rand(2, 1 + td * k, 3, v.height, v.width, generator=gen) * 2 - 1
        with torch.inference_mode():
            mean, logvar = enc(video, ref)
        assert mean.shape == logvar.shape == (2, k + 1, v.latent_channels, h, w)
        assert latent_count(video.shape[1], td) == k + 1
        if k == 2:
            # each latent sees only its own frames: frame 1 belongs to latent 1 alone
            bumped = video.clone()
            bumped[:, 1] = -bumped[:, 1]
            with torch.inference_mode():
                mean2, _ = enc(bumped, ref)
                image = enc.encode_image(video[:, 0])
                as_reference, _ = enc(video, video[:, 0])
                elsewhere, _ = enc(video, -ref)
            assert torch.equal(mean2[:, 0], mean[:, 0]) and torch.equal(mean2[:, 2], mean[:, 2])
            assert not torch.equal(mean2[:, 1], mean[:, 1])
            # the encoder reads the frames against the reference: another reference, other latents
            assert (image - as_reference[:, 0]).abs().max() < 1e-5
            assert (elsewhere - mean).abs().max() > 1e-2
    for bad in (2, td, td + 2, 2 * td):
        with pytest.raises(ValueError):
            enc(torch.zeros(1, bad, 3, v.height, v.width), ref[:1])
    with pytest.raises(ValueError, match="reference"):
        enc(torch.zeros(1, 1, 3, v.height, v.width), ref)


def test_encoder_checkpoint_without_the_reference_input_loads_with_it_off(tmp_path) -> None:
    """An encoder saved before it read the reference difference still loads: the difference
    channels start at zero, so it encodes exactly as before, whatever the reference."""
    cfg = get_config("micro")
    torch.manual_seed(0)
    old = VAEEncoder(cfg).eval()
    state = old.state_dict()
    state["frames.0.weight"] = state["frames.0.weight"][:, :3].clone()
    enc = VAEEncoder(cfg).eval()
    enc.load_state_dict(state)
    w = enc.frames[0].weight
    assert w.shape[1] == VAEEncoder.INPUTS and torch.equal(w[:, :3], state["frames.0.weight"])
    assert not w[:, 3:].any()
    v = cfg.vae
    video = torch.rand(1, 1 + v.temporal_down, 3, v.height, v.width) * 2 - 1
    with torch.inference_mode():
        a, _ = enc(video, torch.zeros(1, 3, v.height, v.width))
        b, _ = enc(video, torch.ones(1, 3, v.height, v.width))
    assert torch.equal(a, b)


def test_latent_time_layout() -> None:
    for td in (1, 2, 4):
        for count in range(1, 9):
            covered = [latent_frames(g, td) for g in range(count)]
            assert covered[0] == (0, 1)
            assert all(a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))
            assert all(hi - lo == td for lo, hi in covered[1:])
            frames = 1 + td * (count - 1)
            assert covered[-1][1] == frames
            assert frame_span(0, count, td) == (0, frames)
            assert frame_span(2, count, td) == (latent_frames(2, td)[0], latent_frames(count + 1, td)[1])
        for n in range(0, 40):
            need = latent_count(n, td)
            assert need == (0 if n == 0 else min(g for g in range(1, 50) if 1 + td * (g - 1) >= n))


def set_warp(dec: VAEDecoder, dx: float, dy: float, mask_logit: float) -> None:
    """A warp head that moves every pixel by (dx, dy) and opens its mask to ``mask_logit``."""
    with torch.no_grad():
        dec.warp[2].weight.zero_()
        dec.warp[2].bias.copy_(torch.tensor([dx, dy, mask_logit]))


def test_the_warp_brings_the_reference_pixels_moved_by_the_flow() -> None:
    dec = decoder("micro", seed=3)
    v = dec.config.vae
    image = torch.rand(1, 3, v.height, v.width, generator=torch.Generator().manual_seed(9)) * 2 - 1
    z = latents(dec, 3, seed=4)
    with torch.inference_mode():
        ref = dec.reference(image)
        set_warp(dec, 2.0, -1.0, 40.0)
        moved, _ = dec.step(z, dec.init_cache(ref))
        set_warp(dec, 0.0, 0.0, -40.0)
        shut, _ = dec.step(z, dec.init_cache(ref))
        dec.set_warp(False)
        drawn, _ = dec.step(z, dec.init_cache(ref))
    # output pixel (y, x) is the reference's (y - 1, x + 2), in every frame
    expected = image[0, :, :-1, 2:]
    assert (moved[0, :, :, 1:, :-2] - expected).abs().max() < 1e-5
    assert (moved[0, :, :, :, :-2] - image[0, :, :, 2:]).abs().max() > 0.1  # not just the reference in place
    assert (shut - drawn).abs().max() < 1e-5  # a closed mask leaves the decoder's own drawing
    assert (drawn - moved).abs().max() > 0.1


def test_a_decoder_checkpoint_from_before_the_warp_loads_with_it_off(tmp_path) -> None:
    dec = decoder("micro", seed=2)
    state = {k: t for k, t in dec.state_dict().items() if not k.startswith("warp")}
    old = VAEDecoder(get_config("micro")).eval()
    old.load_state_dict(state)
    assert old.warp_on.item() == 0.0 and not old.warps
    z = latents(dec, 3, seed=6)
    with torch.inference_mode():
        ref = reference(dec)
        a, _ = old.step(z, old.init_cache(ref))
        dec.set_warp(False)
        b, _ = dec.step(z, dec.init_cache(ref))
    assert torch.equal(a, b)


def test_stacked_caches_keep_each_sessions_reference_image() -> None:
    dec = decoder("micro", seed=1)
    refs = [reference(dec, seed=s) for s in (1, 2)]
    caches = [dec.init_cache(r) for r in refs]
    z = latents(dec, 2, seed=3)
    with torch.inference_mode():
        alone = [dec.step(z, c)[0] for c in caches]
        both, cache = dec.step(torch.cat([z, z]), DecoderCache.stack(caches))
    assert torch.equal(cache.reference.image, torch.cat([r.image for r in refs]))
    for row, frames in enumerate(alone):
        assert (both[row] - frames[0]).abs().max() < 1e-5
    assert all(c.reference is r for c, r in zip(cache.split(refs), refs, strict=True))
