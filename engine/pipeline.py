"""Pipeline: owns the rolling state and runs the N/I chunk schedule.

Streaming: ``session.feed(pcm)`` as audio arrives, ``session.step()`` (off the event
loop) runs the next scheduled chunk once its audio (lookahead included) is in and
returns the frames that became final. Batch: ``pipeline.render(pcm)`` does the same
over a whole file. Weights are loaded once per pipeline and shared by its sessions.
``Pipeline.from_config("puppet")`` gives the procedural engine (``engine.puppet.engine``)
behind the same surface.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from engine.config import PUPPET, ConfiguredEngine, EngineConfig, get_config
from engine.frames import PublishedFrame, drain, stream_frames
from engine.models import WEIGHTS_DIR, ModelSet, compute_dtype
from engine.modules.super_resolution import pool_latents
from engine.modules.vae import latent_count, latent_frames
from engine.schedule import ChunkPlan, ChunkSchedule
from engine.stages.audio_to_video import A2VInput, AudioToVideo
from engine.stages.context_gen import ContextGen, ContextRequest
from engine.stages.decode_publish import DecodeAndPublish, DecodeInput, frame_span, to_uint8
from engine.stages.super_resolution import SRInput, SuperResolutionStage
from engine.state import AudioBuffer, LatentWindow, ReferenceConditioning, RollingState

if TYPE_CHECKING:
    from engine.puppet.engine import PuppetPipeline


def image_to_tensor(image: np.ndarray, height: int, width: int) -> torch.Tensor:
    """(H, W, 3) uint8 -> (1, 3, height, width) in [-1, 1], centre-cropped to the aspect ratio."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError("reference image must be an (H, W, 3) uint8 array")
    h, w = image.shape[:2]
    target = width / height
    if w / h > target:
        cw = round(h * target)
        image = image[:, (w - cw) // 2:(w - cw) // 2 + cw]
    else:
        ch = round(w / target)
        image = image[(h - ch) // 2:(h - ch) // 2 + ch]
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float() / 127.5 - 1
    if x.shape[-2:] != (height, width):
        x = F.interpolate(x, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
    return x.clamp(-1, 1)


def warm_up(pipe: Pipeline | PuppetPipeline, chunks: int = 2) -> int:
    """Run a short silent session and discard it, so the first real session does not pay the
    one-time costs of a fresh process (kernel selection, allocator growth). Returns its frame count."""
    from engine.avatars import avatar_names

    for name in avatar_names():  # bundled avatars' references are encoded once, here
        pipe.open_session(avatar=name)
    samples = pipe.first_chunk_samples + (chunks - 1) * pipe.frames_per_chunk * pipe.config.samples_per_frame
    return sum(1 for _ in pipe.render(np.zeros(samples, np.float32)))


def chunk_seed(seed: int, plan: ChunkPlan) -> int:
    return (seed * 1_000_003 + plan.index * 2 + (plan.kind == "I")) % (2**63 - 1)


class Pipeline(ConfiguredEngine):
    accepts_images = True  # a reference image of a stylised avatar can stand in for a bundled one
    def __init__(self, config: EngineConfig, models: ModelSet, device: str = "cpu",
                 steps: int | None = None) -> None:
        self.config = config
        self.models = models
        self.device = device
        self.steps = steps or config.steps
        self.schedule = ChunkSchedule(config.schedule)
        self.context_gen = ContextGen(config, models.audio)
        self.a2v = AudioToVideo(config, models.dit, self.steps)
        self.sr = SuperResolutionStage(models.sr)
        self.decode = DecodeAndPublish(models.decoder, config.fps, config.audio.sample_rate, config.deblock)
        self.weights_loaded: list[str] = []
        # Bundled avatars' reference encodings, made once: a session of a bundled avatar starts
        # straight at its first chunk. Read-only once made, so sessions (threads) share them.
        self._bundled: dict[str, ReferenceConditioning] = {}

    @classmethod
    def from_config(
        cls, name: str | EngineConfig = "tiny", device: str = "cpu", steps: int | None = None,
        interp: bool = True, weights: str | Path | None = None, threads: int | None = None,
        dtype: str | None = None, seed: int = 0, guidance: float | None = None,
        deblock: tuple[float, ...] | None = None,
    ) -> Pipeline | PuppetPipeline:
        """Build a pipeline; weights come from ``weights`` (a folder), else the bundled
        ``engine/weights/<config>/``, else a fixed seed. The ``puppet`` config gives the
        procedural engine: it has no model, so ``interp``, ``threads``, ``seed`` and ``deblock``
        (which callers always pass) are ignored, and ``PuppetPipeline.from_config`` refuses the rest."""
        config = get_config(name) if isinstance(name, str) else name
        if config.name == PUPPET:
            from engine.puppet.engine import PuppetPipeline

            return PuppetPipeline.from_config(config, device=device, steps=steps, weights=weights, dtype=dtype,
                                              guidance=guidance)
        config = config.with_schedule(interp=interp)
        if dtype is not None:
            config = config.replace(dtype=dtype)
        if steps is not None:
            config = config.replace(steps=steps)
        if guidance is not None:
            config = config.replace(audio_guidance=guidance)
        if deblock is not None:
            config = config.replace(deblock=tuple(deblock))
        if threads is not None:
            torch.set_num_threads(threads)
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("--device cuda requested but no CUDA device is available")
        with torch.device(device):  # initialise large models where they will run
            models = ModelSet.build(config, seed)
        folder = Path(weights) if weights is not None else WEIGHTS_DIR / config.name
        loaded = models.load_dir(folder) if folder.exists() else []
        models.place(device, compute_dtype(config.dtype, device))
        pipe = cls(config, models, device)
        pipe.weights_loaded = loaded
        return pipe

    @property
    def frames_per_chunk(self) -> int:
        """Video frames one N chunk adds (the very first chunk has one more)."""
        return self.config.schedule.chunk * self.config.vae.temporal_down

    @property
    def first_chunk_samples(self) -> int:
        """Audio samples the first chunk needs, its lookahead included, before it can run."""
        return self.context_gen.audio_span(self.schedule.n_chunk(0).span).samples[1]

    def with_interp(self, interp: bool) -> Pipeline:
        """The same loaded models with I chunks switched on or off (nothing is reloaded)."""
        if interp == self.config.schedule.interp:
            return self
        pipe = Pipeline(self.config.with_schedule(interp=interp), self.models, self.device, self.steps)
        pipe.weights_loaded = self.weights_loaded
        pipe._bundled = self._bundled  # same models, same reference encodings
        return pipe

    def reference(self, image: np.ndarray) -> ReferenceConditioning:
        """Encode the avatar's reference image once per session."""
        x = image_to_tensor(image, *self.frame_size).to(self.device)
        with torch.inference_mode():
            hr = self.models.encoder.encode_image(x)
            lr = pool_latents(hr, self.config.dit.lr_factor)
            kv = self.models.dit.encode_reference(lr)
            decoder = self.models.decoder.reference(x)
        return ReferenceConditioning(hr.float(), kv, decoder)

    def reconstruct(self, frames: np.ndarray, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A real video through the autoencoder alone: (T, H, W, 3) uint8 -> its decoded frames,
        directly and after the latents went down to the resolution the DiT generates at and
        back up through super-resolution; T is cut to whole latents (1 + k * temporal_down).

        What is lost here no generated video can have: ``avatar eval`` reports it as the
        model's ceiling."""
        td = self.config.vae.temporal_down
        n = 1 + (len(frames) - 1) // td * td
        video = torch.cat([image_to_tensor(f, *self.frame_size) for f in frames[:n]])[None].to(self.device)
        ref = self.reference(image)
        decoder = self.models.decoder
        with torch.inference_mode():
            hr = self.models.encoder(video, image_to_tensor(image, *self.frame_size).to(self.device))[0][0]
            lr = pool_latents(hr, self.config.dit.lr_factor)
            via_sr = self.sr(SRInput(lr, ref.hr_latent, seed=0)).latents
            direct, pooled = (decoder.step(z[None], decoder.init_cache(ref.decoder))[0][0] for z in (hr, via_sr))
        return to_uint8(direct), to_uint8(pooled)

    def open_session(self, avatar: str | None = None, image: np.ndarray | None = None,
                     seed: int = 0) -> StreamSession:
        if image is not None:
            return StreamSession(self, self.reference(image), seed)
        from engine.avatars import DEFAULT_AVATAR, avatar_image

        name = avatar or DEFAULT_AVATAR
        if name not in self._bundled:
            self._bundled[name] = self.reference(avatar_image(name, self.frame_size))
        return StreamSession(self, self._bundled[name], seed)

    def render(self, pcm: np.ndarray, avatar: str | None = None, image: np.ndarray | None = None,
               seed: int = 0) -> Iterator[PublishedFrame]:
        """Batch mode: the whole audio at once, frames as each chunk is done. The session
        opens here, so a bad avatar or image fails at the call, not at the first frame."""
        session = self.open_session(avatar, image, seed)
        session.feed(pcm)
        session.close_input()
        return drain(session)


class StreamSession:
    """One avatar session's rolling state and schedule position."""

    def __init__(self, pipeline: Pipeline, reference: ReferenceConditioning, seed: int) -> None:
        self.pipe = pipeline
        self.seed = seed
        self.audio = AudioBuffer()
        self.state = RollingState(reference=reference, decoder=pipeline.models.decoder.init_cache(reference.decoder))
        self.finished = False
        self.timings: dict[str, float] = {}
        self.last_chunk = ""
        self._spf = pipeline.config.samples_per_frame
        self._td = pipeline.config.vae.temporal_down

    # --- audio in -------------------------------------------------------------------
    def feed(self, pcm: np.ndarray) -> None:
        """Float32 mono samples at the pipeline's sample rate (thread-safe)."""
        self.audio.feed(pcm)

    def close_input(self) -> None:
        self.audio.close()

    def _total_n_chunks(self) -> int | None:
        """N chunks the stream needs, once the input is closed."""
        if not self.audio.closed:
            return None
        frames = -(-self.audio.total // self._spf)
        return -(-latent_count(frames, self._td) // self.pipe.config.schedule.chunk)

    def _frame_limit(self) -> int | None:
        return -(-self.audio.total // self._spf) if self.audio.closed else None

    def _next_plan(self) -> ChunkPlan | None:
        c = self.state.counters
        if c.pending_i is not None:
            return self.pipe.schedule.i_chunk(c.pending_i)
        total = self._total_n_chunks()
        if total is not None and c.next_n >= total:
            return None
        plan = self.pipe.schedule.n_chunk(c.next_n)
        needed = self.pipe.context_gen.audio_span(plan.span).samples[1]
        return plan if self.audio.closed or self.audio.total >= needed else None

    @property
    def chunks_run(self) -> int:
        return self.state.counters.chunks

    def ready(self) -> bool:
        if self.finished:
            return False
        if self._next_plan() is not None:
            return True
        total = self._total_n_chunks()
        return total is not None and self.state.counters.next_n >= total

    # --- one scheduled unit of work ---------------------------------------------------
    def step(self) -> list[PublishedFrame]:
        """Run the next chunk if it can run; returns the frames that became final."""
        if self.finished:
            return []
        self.timings = {}
        plan = self._next_plan()
        c = self.state.counters
        if plan is None:
            total = self._total_n_chunks()
            if total is None or c.next_n < total:
                return []
            lo, hi = self.pipe.schedule.tail(c.next_n - 1) if c.next_n else (0, 0)
            frames = self._publish(lo, hi)
            self.finished = True
            self.state.latents = None
            return frames
        self._run(plan)
        c.chunks += 1
        if plan.kind == "N":
            c.next_n += 1
            if self.pipe.config.schedule.interp and plan.index >= 1:
                c.pending_i = plan.index - 1
        else:
            c.pending_i = None
        frames = self._publish(*plan.publish)
        self._release()
        self.last_chunk = plan.name
        return frames

    def _timed(self, stage: str, t0: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t0

    def _run(self, plan: ChunkPlan) -> None:
        pipe, state = self.pipe, self.state
        t0 = time.perf_counter()
        span = pipe.context_gen.audio_span(plan.span)
        audio = self.audio.read(*span.samples)
        ctx = pipe.context_gen(ContextRequest(plan.span, audio, chunk_seed(self.seed, plan)))
        self._timed("context", t0)
        t0 = time.perf_counter()
        anchors = None
        if plan.kind == "I":
            (l0, l1), (r0, r1) = plan.anchors
            anchors = torch.zeros(ctx.noise.shape[1:])
            anchors[: l1 - l0] = state.latents.get(l0, l1)
            anchors[r0 - plan.span[0]:] = state.latents.get(r0, r1)
        out = pipe.a2v(A2VInput(plan, ctx, state.reference.kv, state.history, anchors))
        self._timed("a2v", t0)
        if out.history is not None:
            state.history = out.history
        g0 = plan.generate[0]
        if state.latents is None:
            state.latents = LatentWindow(g0, out.latents[:0], ())
        state.latents = state.latents.put(g0, out.latents, plan.name)

    def _publish(self, lo: int, hi: int) -> list[PublishedFrame]:
        c, pipe = self.state.counters, self.pipe
        if hi <= lo or self.state.latents is None:
            return []
        if lo != c.published:
            raise RuntimeError(f"publishing latents [{lo}, {hi}) but {c.published} is next")
        t0 = time.perf_counter()
        lr = self.state.latents.get(lo, hi)
        hr = pipe.sr(SRInput(lr, self.state.reference.hr_latent, self.seed * 7919 + lo)).latents
        self._timed("sr", t0)
        t0 = time.perf_counter()
        f0, f1 = frame_span(lo, hi - lo, self._td)
        audio = self.audio.read(f0 * self._spf, f1 * self._spf)
        origin = self.state.latents.origins(lo, hi)
        out = pipe.decode(DecodeInput(hr, lo, self.state.decoder, audio, self._frame_limit(), origin,
                                      self.state.last_frame))
        self._timed("decode", t0)
        self.state.decoder = out.cache
        self.state.last_frame = out.last
        c.published = hi
        c.frames += len(out.frames)
        return out.frames

    def _release(self) -> None:
        """Drop latents and audio that no later chunk or publish can need."""
        c, sched = self.state.counters, self.pipe.config.schedule
        keep_latent = c.published
        spans = [self.pipe.schedule.n_chunk(c.next_n).span]
        if sched.interp and c.next_n >= 1:
            nxt = self.pipe.schedule.i_chunk(c.pending_i if c.pending_i is not None else c.next_n - 1)
            keep_latent = min(keep_latent, nxt.span[0])
            spans.append(nxt.span)
        if self.state.latents is not None:
            self.state.latents = self.state.latents.drop_before(keep_latent)
        keep_sample = latent_frames(c.published, self._td)[0] * self._spf
        for span in spans:
            keep_sample = min(keep_sample, self.pipe.context_gen.audio_span(span).samples[0])
        self.audio.release_before(keep_sample)

    def nbytes(self) -> int:
        """Bytes of tensors and audio held between chunks."""
        return self.state.nbytes() + self.audio.nbytes()

    def frames(self) -> AsyncIterator[PublishedFrame]:
        """Async streaming: yields frames as chunks finish; compute runs in a worker thread."""
        return stream_frames(self)
