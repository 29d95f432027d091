"""Modules (checkpoints, placement), ModelSet folders, LogMel and ContextGen windows,
the flow-matching sampler, and streaming (async) == batch rendering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import enliven, living_models

from engine.avatars import DEFAULT_AVATAR
from engine.config import EngineConfig, get_config
from engine.models import ModelSet
from engine.modules.audio_encoder import AudioEncoder, LogMel
from engine.modules.base import Module
from engine.modules.dit import A2VDiT
from engine.modules.vae import latent_frames
from engine.pipeline import Pipeline
from engine.sampler import noised, sample, timesteps
from engine.schedule import ChunkPlan, ChunkSchedule
from engine.stages.audio_to_video import A2VInput, AudioToVideo
from engine.stages.context_gen import ChunkContext, ContextGen, ContextRequest

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["audio", "encoder", "dit", "sr", "decoder"]


def module_output(name: str, module: Module, seed: int = 0) -> torch.Tensor:
    """Run one module on a fixed input; returns its output as one float tensor."""
    cfg = module.config
    gen = torch.Generator().manual_seed(seed)
    c, (h, w), lr = cfg.vae.latent_channels, cfg.vae.latent_hw, cfg.dit.lr_factor
    with torch.inference_mode():
        if name == "audio":
            window = AudioEncoder.mel_window(cfg)
            return module(torch.randn(1, 3, window, cfg.audio.mel_bins, generator=gen))
        if name == "encoder":
            video = torch.rand(1, 5, 3, cfg.vae.height, cfg.vae.width, generator=gen) * 2 - 1
            return module(video, torch.rand(1, 3, cfg.vae.height, cfg.vae.width, generator=gen) * 2 - 1)[0]
        if name == "dit":
            ref = module.encode_reference(torch.randn(1, c, h // lr, w // lr, generator=gen))
            x = torch.randn(1, 3, c, h // lr, w // lr, generator=gen)
            audio = torch.randn(1, 3, cfg.dit.audio_tokens, cfg.audio.width, generator=gen)
            return module(x, torch.full((1, 3), 0.5), audio, 9, module.context(9, ref, None))[0]
        if name == "sr":
            return module(torch.randn(2, c, h // lr, w // lr, generator=gen), torch.randn(1, c, h, w, generator=gen))
        if name == "decoder":
            image = torch.rand(1, 3, cfg.vae.height, cfg.vae.width, generator=gen) * 2 - 1
            return module.step(torch.randn(1, 3, c, h, w, generator=gen), module.init_cache(module.reference(image)))[0]
    raise AssertionError(name)


def test_every_module_round_trips_through_safetensors(tmp_path: Path) -> None:
    saved, other = living_models("micro", seed=1), living_models("micro", seed=2)
    for name in NAMES:
        a, b = saved.modules()[name], other.modules()[name]
        path = tmp_path / f"{name}.safetensors"
        a.save(path)
        assert path.stat().st_size > 4 * a.num_parameters()  # fp32 weights are in the file
        out_a = module_output(name, a)
        assert not torch.equal(out_a, module_output(name, b)), f"{name}: seeds 1 and 2 gave the same model"
        assert b.load(path) is b
        assert torch.equal(out_a, module_output(name, b)), name
        for key, value in a.state_dict().items():
            assert torch.equal(value, b.state_dict()[key]), f"{name}.{key}"


def test_checkpoints_of_another_kind_or_shape_are_refused(tmp_path: Path) -> None:
    micro = living_models("micro", seed=1)
    paths = {}
    for name, module in micro.modules().items():
        paths[name] = tmp_path / f"{name}.safetensors"
        module.save(paths[name])
    fresh = ModelSet.build(get_config("micro"), seed=3)
    for name, module in fresh.modules().items():
        for other, path in paths.items():
            if other != name:
                with pytest.raises(ValueError, match="expected"):
                    module.load(path)
    wider = get_config("micro").replace(dit=get_config("tiny").dit)
    tiny = ModelSet.build(get_config("tiny"), seed=0)
    for name in NAMES:
        with pytest.raises(ValueError, match="shape"):
            tiny.modules()[name].load(paths[name])
    with pytest.raises(ValueError, match="shape"):
        ModelSet.build(wider).dit.load(paths["dit"])
    # refused loads leave the weights as they were
    untouched = ModelSet.build(get_config("micro"), seed=3)
    assert torch.equal(module_output("dit", fresh.dit), module_output("dit", untouched.dit))
    # run-time knobs (steps, the I pass, dtype) are not part of a checkpoint's shape
    knobs = get_config("micro").replace(steps=1, interp_steps=1, shift=2.0, dtype="bfloat16")
    knobs = knobs.with_schedule(interp=False)
    for name, module in ModelSet.build(knobs, seed=4).modules().items():
        module.load(paths[name])
        assert torch.equal(module_output(name, module), module_output(name, micro.modules()[name])), name


def test_modelset_folders_and_pipeline_weights(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    saved = living_models("micro", seed=5)
    saved.save_dir(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.safetensors" for n in NAMES)
    loaded = ModelSet.build(get_config("micro"), seed=6)
    assert loaded.load_dir(folder) == NAMES
    for name in NAMES:
        assert torch.equal(module_output(name, loaded.modules()[name]), module_output(name, saved.modules()[name]))
    # the pipeline loads them whatever the run-time options
    for kwargs in ({}, {"interp": False}, {"steps": 1}, {"steps": 8, "interp": False}):
        pipe = Pipeline.from_config("micro", weights=folder, **kwargs)
        assert pipe.weights_loaded == NAMES, kwargs
        assert pipe.steps == kwargs.get("steps", get_config("micro").steps)
        assert pipe.config.schedule.interp == kwargs.get("interp", True)
        loaded_dit, saved_dit = pipe.models.dit.state_dict(), saved.dit.state_dict()
        assert loaded_dit.keys() == saved_dit.keys()
        assert all(torch.equal(loaded_dit[k], saved_dit[k]) for k in saved_dit), kwargs  # the very same weights
        torch.testing.assert_close(module_output("dit", pipe.models.dit), module_output("dit", saved.dit),
                                   rtol=0, atol=1e-6)
    partial = tmp_path / "partial"
    partial.mkdir()
    (folder / "dit.safetensors").rename(partial / "dit.safetensors")
    assert ModelSet.build(get_config("micro")).load_dir(partial) == ["dit"]
    assert ModelSet.build(get_config("micro")).load_dir(folder) == ["audio", "encoder", "sr", "decoder"]


def test_module_placement_changes_dtype_and_keeps_values() -> None:
    models = living_models("micro", seed=7)
    sr = models.sr
    before = module_output("sr", sr)
    sr.place("cpu", torch.bfloat16)
    assert sr.dtype == torch.bfloat16 and sr.device.type == "cpu"
    assert module_output("sr", sr).dtype == torch.float32  # SR hands back fp32 latents
    assert (module_output("sr", sr) - before).abs().max() < 0.1
    assert models.nbytes() == sum(4 * m.num_parameters() for m in models.modules().values()) - 2 * sr.num_parameters()
    sr.place("cpu", torch.float32)
    assert sr.dtype == torch.float32
    assert (module_output("sr", sr) - before).abs().max() < 0.05


# --- LogMel and ContextGen -----------------------------------------------------------------------


def zero_padded(pcm: np.ndarray, lo: int, hi: int) -> np.ndarray:
    out = np.zeros(hi - lo, np.float32)
    a, b = max(lo, 0), min(hi, pcm.size)
    if b > a:
        out[a - lo:b - lo] = pcm[a:b]
    return out


def test_logmel_of_a_sub_span_equals_the_slice_of_the_whole(speech) -> None:
    cfg = get_config("micro").audio
    mel = LogMel(cfg)
    pcm = speech(1.2, seed=3)
    frames = pcm.size // cfg.hop + 1
    whole = mel(torch.from_numpy(zero_padded(pcm, *mel.span(0, frames))))
    assert whole.shape == (frames, cfg.mel_bins)
    assert whole.std() > 0.1
    for first, count in [(0, 1), (3, 7), (50, 32), (frames - 1, 1), (17, 64), (1, frames - 1)]:
        lo, hi = mel.span(first, count)
        assert hi - lo == (count - 1) * cfg.hop + cfg.n_fft
        part = mel(torch.from_numpy(zero_padded(pcm, lo, hi)))
        assert part.shape == (count, cfg.mel_bins)
        assert (part - whole[first:first + count]).abs().max() < 1e-5, (first, count)


def test_logmel_puts_a_tone_in_its_band_and_silence_on_the_floor() -> None:
    cfg = get_config("micro").audio
    mel = LogMel(cfg)
    t = np.arange(cfg.sample_rate) / cfg.sample_rate
    for freq in (300.0, 1000.0, 3000.0):
        feats = mel(torch.from_numpy((0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)))
        band = int(feats.mean(0).argmax())
        centre = float(mel.filters[:, band].argmax()) * cfg.sample_rate / cfg.n_fft
        assert abs(centre - freq) < 0.12 * freq, (freq, centre)
    silent = mel(torch.zeros(cfg.n_fft + 10 * cfg.hop))
    assert torch.allclose(silent, torch.full_like(silent, -1.0))  # log10 floor -8, normalised


def context_gen(seed: int = 0) -> ContextGen:
    cfg = get_config("micro")
    torch.manual_seed(seed)
    return ContextGen(cfg, enliven(AudioEncoder(cfg), seed + 1).eval())


def test_context_windows_follow_each_latent_with_fixed_lookahead() -> None:
    gen = context_gen()
    cfg: EngineConfig = gen.config
    a, td, spf = cfg.audio, cfg.vae.temporal_down, cfg.samples_per_frame
    mel_per_frame = spf // a.hop
    context = a.context_ms * a.sample_rate // 1000 // a.hop
    width = mel_per_frame * td + 2 * context
    for g in range(0, 12):
        span = gen.audio_span((g, g + 1))
        lo, hi = latent_frames(g, td)
        assert span.mel_count == width
        # the window ends `context_ms` after the latent's last frame (the lookahead) ...
        assert span.first_mel + span.mel_count == hi * mel_per_frame + context
        # ... and for every later latent starts `context_ms` before its first frame
        if g:
            assert span.first_mel == lo * mel_per_frame - context
        assert span.samples == (span.first_mel * a.hop - a.n_fft // 2,
                                (span.first_mel + span.mel_count - 1) * a.hop + a.n_fft // 2)
        many = gen.audio_span((g, g + 5))
        assert many.first_mel == span.first_mel
        assert many.first_mel + many.mel_count == gen.audio_span((g + 4, g + 5)).first_mel + width


def test_context_tokens_do_not_depend_on_the_chunking(speech) -> None:
    gen = context_gen(2)
    pcm = speech(2.0, seed=7)

    def tokens(span: tuple[int, int], audio: np.ndarray = pcm, seed: int = 0):
        lo, hi = gen.audio_span(span).samples
        return gen(ContextRequest(span, zero_padded(audio, lo, hi), seed))

    whole = tokens((0, 9))
    cfg = gen.config
    assert whole.audio_tokens.shape == (1, 9, cfg.dit.audio_tokens, cfg.audio.width)
    for g in range(9):
        assert (tokens((g, g + 1)).audio_tokens[0, 0] - whole.audio_tokens[0, g]).abs().max() < 1e-5, g
    assert (tokens((3, 7)).audio_tokens - whole.audio_tokens[:, 3:7]).abs().max() < 1e-5
    # noise: per request seed, shaped like the low-res latents
    lh, lw = (n // cfg.dit.lr_factor for n in cfg.vae.latent_hw)
    assert whole.noise.shape == (1, 9, cfg.vae.latent_channels, lh, lw)
    assert torch.equal(tokens((0, 9)).noise, whole.noise)
    assert not torch.equal(tokens((0, 9), seed=1).noise, whole.noise)
    # a burst of sound changes exactly the latents whose window hears it
    burst = np.zeros(pcm.size, np.float32)
    b0, b1 = 11 * 640 + 123, 12 * 640 + 50
    burst[b0:b1] = pcm[b0:b1] * 4
    silent, loud = tokens((0, 9), np.zeros_like(pcm)), tokens((0, 9), burst)
    for g in range(9):
        lo, hi = gen.audio_span((g, g + 1)).samples
        hears = lo < b1 and b0 < hi
        changed = bool((loud.audio_tokens[0, g] - silent.audio_tokens[0, g]).abs().max() > 1e-6)
        assert changed == hears, (g, lo, hi)
    with pytest.raises(ValueError):
        gen(ContextRequest((0, 2), np.zeros(100, np.float32), 0))


# --- sampler --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [1.0, 3.0, 5.0])
def test_timesteps_are_a_shifted_grid_from_one_to_zero(shift: float) -> None:
    for steps in range(1, 9):
        ts = timesteps(steps, shift)
        assert len(ts) == steps + 1 and ts[0] == 1.0 and ts[-1] == 0.0
        assert all(a > b for a, b in zip(ts, ts[1:], strict=False))
        for i, t in enumerate(ts):
            g = 1 - i / steps
            assert abs(t - shift * g / (1 + (shift - 1) * g)) < 1e-12
            if shift > 1 and 0 < i < steps:
                assert t > g  # more of the steps spent at high noise
    for bad in (0, 9, -1):
        with pytest.raises(ValueError):
            timesteps(bad, shift)


def test_bad_step_counts_are_refused_everywhere() -> None:
    for bad in (0, 9):
        with pytest.raises(ValueError):
            get_config("micro").replace(steps=bad)
        with pytest.raises(ValueError):
            Pipeline.from_config("micro", steps=bad)


def test_sampler_integrates_a_straight_flow_exactly_and_keeps_fixed_frames() -> None:
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(1, 5, 3, 2, 2, generator=gen)
    noise = torch.randn(1, 5, 3, 2, 2, generator=gen)
    fixed = torch.tensor([[True, False, False, False, True]])
    anchors = noised(x0, noise, 0.05)
    start = torch.where(fixed[..., None, None, None], anchors, noise)
    assert torch.equal(noised(x0, noise, 0.0), x0) and torch.equal(noised(x0, noise, 1.0), noise)
    for steps in range(1, 9):
        seen: list[torch.Tensor] = []

        def velocity(x: torch.Tensor, t: torch.Tensor, seen: list[torch.Tensor] = seen) -> torch.Tensor:
            seen.append(t.clone())
            return noise - x0  # the exact velocity of the straight path

        out = sample(velocity, start, fixed, 0.05, steps, 3.0)
        assert len(seen) == steps
        grid = timesteps(steps, 3.0)
        for t, expect in zip(seen, grid[:-1], strict=True):
            assert torch.allclose(t[0, 1:4], torch.full((3,), expect))
            assert torch.allclose(t[0, [0, 4]], torch.full((2,), 0.05))
        assert (out[0, 1:4] - x0[0, 1:4]).abs().max() < 1e-5, steps
        assert torch.equal(out[0, [0, 4]], anchors[0, [0, 4]])


# --- streaming == batch ------------------------------------------------------------------------


async def test_async_streaming_equals_batch_render(micro_pipe: Pipeline, speech) -> None:
    pcm = speech(3.3, seed=21)
    batch = list(micro_pipe.render(pcm, seed=5))
    session = micro_pipe.open_session(seed=5)
    first_frame = asyncio.Event()
    closed_before_first: list[bool] = []

    async def feeder() -> None:
        rng = np.random.default_rng(0)
        at = 0
        while at < pcm.size:
            if at > pcm.size // 2 and not first_frame.is_set():
                await first_frame.wait()  # live: frames come out while audio still comes in
            n = int(rng.integers(50, 3000))
            session.feed(pcm[at:at + n])
            at += n
            await asyncio.sleep(0.001)
        session.close_input()

    task = asyncio.create_task(feeder())
    streamed = []
    async for frame in session.frames():
        if not streamed:
            closed_before_first.append(session.audio.closed)
            first_frame.set()
        streamed.append(frame)
    await task
    assert closed_before_first == [False]
    assert len(streamed) == len(batch) == -(-pcm.size // 640)
    for s, b in zip(streamed, batch, strict=True):
        assert (s.index, s.chunk, s.pts) == (b.index, b.chunk, b.pts)
        assert np.array_equal(s.rgb, b.rgb), s.index
        assert np.array_equal(s.audio, b.audio), s.index
    assert len({f.rgb.tobytes() for f in batch}) > len(batch) // 2  # frames really vary


# --- AudioToVideo ---------------------------------------------------------------------------------


class DiTSpy:
    """Stands in for the DiT inside the AudioToVideo stage and records every call."""

    def __init__(self, dit: torch.nn.Module) -> None:
        self.dit = dit
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.dit, name)

    def __call__(self, x: torch.Tensor, t: torch.Tensor, *args: object, **kwargs: object) -> tuple:
        self.calls.append((x.clone(), t.clone()))
        return self.dit(x, t, *args, **kwargs)


def test_a2v_holds_anchors_clean_and_runs_the_step_grid() -> None:
    cfg = get_config("micro")
    models = living_models("micro", seed=8)
    spy = DiTSpy(models.dit)
    stage = AudioToVideo(cfg, spy)  # type: ignore[arg-type]
    assert isinstance(spy.dit, A2VDiT)
    gen = ContextGen(cfg, models.audio)
    sched = ChunkSchedule(cfg.schedule)
    ref = models.dit.encode_reference(torch.randn(1, cfg.vae.latent_channels, 2, 2))
    sigma, a = cfg.context_sigma, cfg.schedule.anchor

    def context(plan: ChunkPlan) -> ChunkContext:
        lo, hi = gen.audio_span(plan.span).samples
        return gen(ContextRequest(plan.span, np.zeros(hi - lo, np.float32), seed=plan.index))

    n_plan = sched.n_chunk(1)
    out = stage(A2VInput(n_plan, context(n_plan), ref, None, None))
    grid = timesteps(cfg.steps, cfg.shift)
    assert len(spy.calls) == cfg.steps + 1  # the denoising steps, then one pass for the K/V window
    for (_, t), expect in zip(spy.calls, grid[:-1], strict=False):
        assert torch.allclose(t, torch.full_like(t, expect))
    assert torch.allclose(spy.calls[-1][1], torch.full_like(spy.calls[-1][1], sigma))
    assert out.history.frames() == list(range(n_plan.span[1] - cfg.dit.window, n_plan.span[1]))

    spy.calls.clear()
    i_plan = sched.i_chunk(1)
    ctx = context(i_plan)
    f = i_plan.span[1] - i_plan.span[0]
    anchors = torch.randn(f, *ctx.noise.shape[2:], generator=torch.Generator().manual_seed(1))
    out = stage(A2VInput(i_plan, ctx, ref, None, anchors))
    steps = min(cfg.steps, cfg.interp_steps)
    assert len(spy.calls) == steps  # no K/V pass: I chunks never feed the history window
    clean = noised(anchors[None], ctx.noise, sigma)
    for (x, t), expect in zip(spy.calls, timesteps(steps, cfg.shift)[:-1], strict=True):
        for side in (slice(0, a), slice(f - a, f)):
            assert torch.allclose(t[0, side], torch.full((a,), sigma))  # anchors stay clean ...
            assert torch.equal(x[0, side], clean[0, side])  # ... and unchanged
        assert torch.allclose(t[0, a:f - a], torch.full((f - 2 * a,), expect))
    assert out.history is None and out.latents.shape[1] == i_plan.generate[1] - i_plan.generate[0]


def test_guidance_extrapolates_from_the_silent_prediction_in_one_batched_pass(speech) -> None:
    """With one sampling step the chunk is linear in the velocity, so the guided chunk must be
    the silent chunk plus g times (spoken - silent); the silence tokens are what ContextGen
    gives for real digital silence."""
    g = 3.0
    base = get_config("micro").replace(steps=1)
    guided_cfg = base.replace(audio_guidance=g)
    models = living_models("micro", seed=9)
    gen = ContextGen(guided_cfg, models.audio)
    plan = ChunkSchedule(base.schedule).n_chunk(1)
    lo, hi = gen.audio_span(plan.span).samples
    pcm = speech(2.0, seed=3)
    ctx = gen(ContextRequest(plan.span, zero_padded(pcm, lo, hi), seed=4))
    assert ctx.silence_tokens is not None and ctx.silence_tokens.shape == (1, 1, *ctx.audio_tokens.shape[2:])
    quiet = gen(ContextRequest(plan.span, np.zeros(hi - lo, np.float32), seed=4))
    assert torch.allclose(quiet.audio_tokens[:, 1:], ctx.silence_tokens.expand_as(quiet.audio_tokens[:, 1:]),
                          atol=1e-5)
    assert ContextGen(base, models.audio)(ContextRequest(plan.span, zero_padded(pcm, lo, hi), 4)).silence_tokens is None
    ref = models.dit.encode_reference(torch.randn(1, base.vae.latent_channels, 2, 2))
    silent_ctx = ChunkContext(ctx.span, ctx.silence_tokens.expand_as(ctx.audio_tokens), ctx.noise)
    spoken = AudioToVideo(base, models.dit)(A2VInput(plan, ctx, ref)).latents
    silent = AudioToVideo(base, models.dit)(A2VInput(plan, silent_ctx, ref)).latents
    spy = DiTSpy(models.dit)
    out = AudioToVideo(guided_cfg, spy)(A2VInput(plan, ctx, ref))  # type: ignore[arg-type]
    assert (spoken - silent).abs().max() > 1e-3  # the audio matters, so the check below has teeth
    assert torch.allclose(out.latents, silent + g * (spoken - silent), atol=1e-4)
    assert spy.calls[0][0].shape[0] == 2 and len(spy.calls) == 2  # one batched step, then the K/V pass
    for guided_steps in (1, 2):  # only the first ``guidance_steps`` of 3 steps pay for the silent pass
        spy.calls.clear()
        cfg = guided_cfg.replace(steps=3, guidance_steps=guided_steps)
        AudioToVideo(cfg, spy)(A2VInput(plan, ctx, ref))  # type: ignore[arg-type]
        assert [x.shape[0] for x, _ in spy.calls] == [2] * guided_steps + [1] * (4 - guided_steps)
    spy.calls.clear()  # a chunk of digital silence is its own silent prediction: no guidance pass
    AudioToVideo(guided_cfg, spy)(A2VInput(plan, quiet, ref))  # type: ignore[arg-type]
    assert spy.calls and all(x.shape[0] == 1 for x, _ in spy.calls)
    spy.calls.clear()  # I chunks sit between guided anchors: they run unguided
    i_plan = ChunkSchedule(base.schedule).i_chunk(1)
    lo, hi = gen.audio_span(i_plan.span).samples
    i_ctx = gen(ContextRequest(i_plan.span, zero_padded(pcm, lo, hi), seed=5))
    anchors = torch.randn(i_plan.span[1] - i_plan.span[0], *i_ctx.noise.shape[2:])
    AudioToVideo(guided_cfg, spy)(A2VInput(i_plan, i_ctx, ref, None, anchors))  # type: ignore[arg-type]
    assert spy.calls and all(x.shape[0] == 1 for x, _ in spy.calls)
    with pytest.raises(ValueError, match="audio_guidance"):
        base.replace(audio_guidance=-1.0)
    with pytest.raises(ValueError, match="guidance_steps"):
        base.replace(guidance_steps=0)


def test_bundled_avatar_references_are_encoded_once_and_shared(astronaut) -> None:
    """A bundled avatar's reference is encoded at its first session and reused by later ones
    (and by the pipeline's I-chunk sibling, and by photo sessions it drives); an image without a
    face is refused at the call."""
    pipe = Pipeline.from_config("micro")
    first = pipe.open_session(seed=0)
    again = pipe.open_session(seed=1)
    sibling = pipe.with_interp(not pipe.config.schedule.interp).open_session(avatar=DEFAULT_AVATAR)
    assert again.state.reference is first.state.reference is sibling.state.reference
    photo = pipe.open_session(image=astronaut)
    assert photo.state.reference is first.state.reference and photo.frame_size == (512, 512)
    with pytest.raises(ValueError, match="no face found"):
        pipe.open_session(image=np.full((*pipe.frame_size, 3), 90, np.uint8))


def test_a_lookahead_change_refuses_the_audio_models_but_not_the_image_models(tmp_path) -> None:
    """The lookahead is part of what the audio encoder and the DiT learned; the autoencoder and
    the SR stage never see audio."""
    import dataclasses

    from engine.config import get_config
    from engine.models import ModelSet

    micro = get_config("micro")
    ModelSet.build(micro, 0).save_dir(tmp_path)
    ahead = dataclasses.replace(micro, audio=dataclasses.replace(micro.audio, lookahead_ms=20))
    other = ModelSet.build(ahead, 0)
    for name in ("encoder", "decoder", "sr"):
        getattr(other, name).load(tmp_path / f"{name}.safetensors")
    for name in ("dit", "audio"):
        with pytest.raises(ValueError, match="audio window"):
            getattr(other, name).load(tmp_path / f"{name}.safetensors")


def test_a_kv_only_pass_gives_the_full_pass_keys_and_values_without_a_velocity() -> None:
    """The history window needs only K/V: the last block stops at them, and they are exactly the
    full forward's."""
    torch.manual_seed(0)
    config = get_config("tiny")
    dit = A2VDiT(config).eval()
    h, w = config.vae.latent_hw
    lr = config.dit.lr_factor
    x = torch.randn(2, 3, config.vae.latent_channels, h // lr, w // lr)
    t = torch.full((2, 3), 0.05)
    audio = torch.randn(2, 3, config.dit.audio_tokens, config.audio.width)
    reference = dit.encode_reference(torch.randn(2, config.vae.latent_channels, h // lr, w // lr))
    with torch.inference_mode():
        velocity, kv = dit(x, t, audio, 4, dit.context(4, reference, None))
        none, kv_only = dit(x, t, audio, 4, dit.context(4, reference, None), kv_only=True)
    assert velocity is not None and velocity.shape == x.shape and none is None
    assert torch.equal(kv.k, kv_only.k) and torch.equal(kv.v, kv_only.v) and torch.equal(kv.frame, kv_only.frame)
