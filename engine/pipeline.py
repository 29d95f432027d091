"""Pipeline: owns the rolling state and runs the N/I chunk schedule.

Streaming: ``session.feed(pcm)`` as audio arrives, ``session.step()`` (off the event
loop) runs the next scheduled chunk once its audio (lookahead included) is in and
returns the frames that became final. Many sessions: ``pipeline.step_batch(sessions)``
runs the next chunks of sessions with equal ``batch_key()`` in one batched forward of
each model (``step()`` is a batch of one). Batch: ``pipeline.render(pcm)`` does the same
over a whole file. Weights are loaded once per pipeline and shared by its sessions.
``Pipeline.from_config("puppet")`` gives the procedural engine (``engine.puppet.engine``)
behind the same surface.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from engine.batch import DRAW, BatchKey, BatchResult, Render, draw_key, shared_key
from engine.config import PUPPET, ConfiguredEngine, EngineConfig, get_config
from engine.frames import PublishedFrame, drain, stream_frames
from engine.hooks import Hooks
from engine.models import WEIGHTS_DIR, ModelSet, compute_dtype
from engine.modules.dit import KVBlock
from engine.modules.super_resolution import pool_latents
from engine.modules.vae import DecoderCache, latent_count, latent_frames
from engine.photo.latent_reader import LATENT_READER_PATH, LatentMotionReader, load_latent_reader
from engine.presets import Preset, preset_named
from engine.quality import Quality
from engine.schedule import ChunkPlan, ChunkSchedule
from engine.stages.audio_to_video import A2VInput, AudioToVideo
from engine.stages.context_gen import ChunkContext, ContextGen, ContextRequest
from engine.stages.decode_publish import (
    DecodeAndPublish,
    DecodeInput,
    frame_latent,
    frame_span,
    published_frames,
    stamped,
    to_uint8,
)
from engine.stages.history import HistoryWindow
from engine.stages.motion_backlog import POSE_LAG_FRAMES, MotionBacklog
from engine.stages.super_resolution import SRInput, SuperResolutionStage
from engine.state import AudioBuffer, AudioFed, LatentWindow, ReferenceConditioning, RollingState

if TYPE_CHECKING:
    from engine.photo.avatar import PhotoAvatar
    from engine.puppet import Identity
    from engine.puppet.engine import PuppetPipeline
    from engine.stages.redraw import Heard, Redraw, RedrawState


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
    silence = np.zeros(pipe.first_chunk_samples + (chunks - 1) * pipe.frames_per_chunk * pipe.config.samples_per_frame,
                       np.float32)
    frames = sum(1 for _ in pipe.render(silence))
    if isinstance(pipe, Pipeline):  # and drawn: the motion reader loaded, the redraw stage made
        frames += sum(1 for _ in pipe.render(silence, drawn=True))
    return frames


def chunk_seed(seed: int, plan: ChunkPlan) -> int:
    return (seed * 1_000_003 + plan.index * 2 + (plan.kind == "I")) % (2**63 - 1)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


class Pipeline(ConfiguredEngine):
    accepts_images = True  # a reference image of a stylised avatar can stand in for a bundled one
    renders: tuple[Render, ...] = tuple(Render)
    # Redrawn sessions (photos, drawn avatars) take their mouths from what is heard in their
    # audio rather than from the DiT's face (``engine.stages.redraw``); False: the DiT's mouth.
    heard_mouth = True
    # Frames a hearing redrawn session's head lags its mouth: its frames are drawn one by one as
    # their mouths are heard, not with the DiT chunk that holds them (``engine.stages.motion_backlog``);
    # None: drawn with their chunk, the head in step with the mouth.
    pose_lag: int | None = POSE_LAG_FRAMES

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
        # What sessions must share to run in one batch: the weights and the config, whose
        # default interp setting aside (``with_interp`` siblings batch together).
        self.batch_engine = (id(models), config.with_schedule(interp=False))
        # Bundled avatars' reference encodings, made once: a session of a bundled avatar starts
        # straight at its first chunk. Read-only once made, so sessions (threads) share them.
        self._bundled: dict[str, ReferenceConditioning] = {}
        self._redraw: Redraw | None = None  # made at the first redrawn session's first frames
        # Reads redrawn sessions' motion from their latents (no decoding); None: from decoded frames.
        self.latent_reader: LatentMotionReader | None = None
        # What other parts (offload, a bench) do as a session opens and around each stage's call.
        self.hooks = Hooks()

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
        if steps is not None:  # every preset's
            config = config.replace(steps=steps, fast_steps=None, redrawn_steps=None)
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
        if "dit" in loaded:  # a latent reader reads the latents of the DiT it was distilled from
            pipe.latent_reader = load_latent_reader(folder / LATENT_READER_PATH.name)
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
        return self._sibling(self.config.with_schedule(interp=interp))

    def preset(self, name: str) -> Pipeline:
        """The same loaded models scheduled as a quality preset: ``quality`` with I chunks at the
        config's chunk size, ``fast`` without them at ``fast_chunk`` and ``fast_steps`` (less audio to
        wait for, less compute per chunk)."""
        if preset_named(name) is Preset.QUALITY:
            return self.with_interp(True)
        chunk, steps = self.config.fast_schedule(self.steps)
        if (chunk, steps) == (self.config.schedule.chunk, self.steps):
            return self.with_interp(False)
        return self._sibling(self.config.with_schedule(chunk=chunk, interp=False), steps)

    def draws_apart(self, render: Render) -> bool:
        """Whether sessions rendered ``render`` draw their frames one by one as their mouths are heard
        (``DRAW`` work), apart from the chunks that make their motion."""
        return (render is not Render.DECODED and self.heard_mouth and self.latent_reader is not None
                and self.pose_lag is not None)

    def steps_for(self, render: Render) -> int:
        """N-chunk steps of this pipeline's sessions rendered ``render``: ``redrawn_steps`` where the
        frames are drawn at motion read off the latents, which no one sees."""
        redrawn = self.config.redrawn_steps
        if render is Render.DECODED or self.latent_reader is None or redrawn is None:
            return self.steps
        return min(self.steps, redrawn)

    def _sibling(self, config: EngineConfig, steps: int | None = None) -> Pipeline:
        # a subclass's siblings are its own kind
        pipe = type(self)(config, self.models, self.device, steps or self.steps)
        pipe.weights_loaded = self.weights_loaded
        pipe._bundled = self._bundled  # same models, same reference encodings
        pipe.latent_reader = self.latent_reader
        pipe.heard_mouth = self.heard_mouth
        pipe.pose_lag = self.pose_lag
        pipe.hooks = self.hooks.copy()
        return pipe

    def forget_references(self) -> None:
        """Drop the bundled avatars' reference encodings (for this pipeline and its siblings): the
        next session of each encodes its reference again, e.g. once the DiT's blocks moved."""
        self._bundled.clear()

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
            via_sr = self.hooks.run("sr", self.sr, SRInput(lr[None], ref.hr_latent, (0,))).latents[0]
            direct, pooled = (decoder.step(z[None], decoder.init_cache(ref.decoder))[0][0] for z in (hr, via_sr))
        return to_uint8(direct), to_uint8(pooled)

    def open_session(self, avatar: str | Identity | None = None, image: np.ndarray | None = None,
                     seed: int = 0, photo: PhotoAvatar | None = None,
                     reference: np.ndarray | None = None, drawn: bool = False) -> StreamSession:
        """A session of a bundled avatar, or of a photograph (``image``, or a ``photo`` already
        made of one: ``FaceError`` when it has no usable face). A photo session's DiT drives the
        bundled ``avatar`` (default: the default avatar) and its frames are the photo warped to
        that face's motion (``engine.stages.redraw``). ``drawn``: a bundled avatar's frames are
        drawn by its renderer at the generated face's motion instead of decoded (sharp; the
        same stage). ``avatar`` may also be an ``Identity`` the DiT has not seen (the held-out
        ones ``avatar eval`` scores); ``reference``: a stylised portrait the DiT draws from alone."""
        with self.hooks.opening():
            return self._open_session(avatar, image, seed, photo, reference, drawn)

    def _open_session(self, avatar: str | Identity | None, image: np.ndarray | None, seed: int,
                      photo: PhotoAvatar | None, reference: np.ndarray | None, drawn: bool) -> StreamSession:
        from engine.avatars import DEFAULT_AVATAR, avatar_image

        if reference is not None:
            return StreamSession(self, self.reference(reference), seed)
        if image is not None and photo is None:
            from engine.photo.avatar import photo_avatar

            photo = photo_avatar(image)
        if avatar is not None and not isinstance(avatar, str):
            from engine.puppet import reference_image

            driver_image = reference_image(avatar, max(self.frame_size))
            conditioning = self.reference(driver_image)
        else:
            name = avatar or DEFAULT_AVATAR
            driver_image = avatar_image(name, self.frame_size)
            if name not in self._bundled:
                self._bundled[name] = self.reference(driver_image)
            conditioning = self._bundled[name]
        redraw = None
        if photo is not None or drawn:
            from engine.stages.redraw import HeardMouth, RedrawState

            heard = HeardMouth.of(self.config.audio.sample_rate, self.config.fps) if self.heard_mouth else None
            redraw = RedrawState(self._drawer(avatar, photo, heard is not None), driver_image,
                                 latent_reference=pool_latents(conditioning.hr_latent, self.config.dit.lr_factor)[0],
                                 heard=heard)
        render = Render.PHOTO if photo is not None else Render.DRAWN if drawn else Render.DECODED
        return StreamSession(self, conditioning, seed, redraw, render)

    def _drawer(self, avatar: str | Identity | None, photo: PhotoAvatar | None, hears: bool = False):
        """A redrawn session's drawer: the photo's rig (its jaw set for mouths heard or read off the
        driver), else the avatar's own renderer."""
        if photo is not None:
            from engine.face.rig import HEARD_JAW, READ_JAW, PhotoRig

            return PhotoRig.from_photo(photo.image, photo.face, photo.mouths, photo.sway,
                                       HEARD_JAW if hears else READ_JAW)
        from engine.avatars import DEFAULT_AVATAR
        from engine.puppet import Identity, get_identity
        from engine.puppet.rig import PuppetRig

        identity = avatar if isinstance(avatar, Identity) else get_identity(avatar or DEFAULT_AVATAR)
        return PuppetRig(identity, max(self.frame_size))

    def render(self, pcm: np.ndarray, avatar: str | None = None, image: np.ndarray | None = None,
               seed: int = 0, reference: np.ndarray | None = None, drawn: bool = False) -> Iterator[PublishedFrame]:
        """Batch mode: the whole audio at once, frames as each chunk is done. The session
        opens here, so a bad avatar or image fails at the call, not at the first frame."""
        session = self.open_session(avatar, image, seed, reference=reference, drawn=drawn)
        session.feed(pcm)
        session.close_input()
        return drain(session)

    # --- batched execution ------------------------------------------------------------
    def step_batch(self, sessions: Sequence[StreamSession]) -> BatchResult:
        """Run the next chunk of every session, all in one batch: one forward of each model
        over all of them. Each session ends exactly as ``step()`` alone would leave it.

        Every session must have the same ``batch_key()``; sessions with nothing to run
        (key None) get no frames."""
        work = [s.next_work() for s in sessions]  # one read of each session's quality
        key = shared_key(sessions, [w.key if w is not None else None for w in work], self.batch_engine)
        timings: dict[str, float] = {}
        if key is None:
            frames: list[list[PublishedFrame]] = [[] for _ in sessions]
        elif key.kind == "tail":
            frames = [s.publish_tail(timings) for s in sessions]
        elif key.kind == DRAW:
            frames = self._draw(sessions, key.span, timings)
        else:
            frames = self._run_chunk(sessions, [w.plan for w in work], [w.schedule for w in work], key, timings)
        for s in sessions:
            s.timings = dict(timings)
        return BatchResult(frames, timings)

    def _run_chunk(self, sessions: Sequence[StreamSession], plans: list[ChunkPlan],
                   schedules: list[ChunkSchedule], key: BatchKey,
                   timings: dict[str, float]) -> list[list[PublishedFrame]]:
        self._generate(sessions, plans, key, timings)
        for s, plan, schedule in zip(sessions, plans, schedules, strict=True):
            s.advance(plan, schedule)
        frames = self.publish(sessions, [p.publish for p in plans], timings)
        for s, plan in zip(sessions, plans, strict=True):
            s.release_spent()
            s.last_chunk = plan.name
        return frames

    def _generate(self, sessions: Sequence[StreamSession], plans: list[ChunkPlan], key: BatchKey,
                  timings: dict[str, float]) -> None:
        """ContextGen per session, then AudioToVideo once for all: the new latents and history
        go back to each session. The batch runs on the first plan's timeline (the DiT sees
        only positions relative to the chunk), so each history is shifted there and back."""
        with _timed(timings, "context"):
            contexts = []
            for s, plan in zip(sessions, plans, strict=True):
                audio = s.audio.read(*self.context_gen.audio_span(plan.span).samples)
                contexts.append(self.context_gen(ContextRequest(plan.span, audio, chunk_seed(s.seed, plan),
                                                                key.guided)))
        with _timed(timings, "a2v"):
            layout = plans[0]
            shifts = [p.span[0] - layout.span[0] for p in plans]
            history = None
            if layout.kind == "N" and key.history:
                history = HistoryWindow.stack([s.state.history.shifted(-d)
                                               for s, d in zip(sessions, shifts, strict=True)])
            anchors = None
            if layout.kind == "I":
                anchors = torch.stack([s.anchor_latents(p) for s, p in zip(sessions, plans, strict=True)])
            reference = KVBlock.stack([s.state.reference.kv for s in sessions])
            out = self.hooks.run("a2v", self.a2v, A2VInput(layout, ChunkContext.stack(contexts), reference, history,
                                                            anchors, key.steps))
        histories = out.history.split() if out.history is not None else [None] * len(sessions)
        for s, plan, d, latents, hist in zip(sessions, plans, shifts, out.latents, histories, strict=True):
            if hist is not None:
                s.state.history = hist.shifted(d)
            s.keep_latents(plan, latents)

    def publish(self, sessions: Sequence[StreamSession], spans: list[tuple[int, int]],
                timings: dict[str, float]) -> list[list[PublishedFrame]]:
        """Latents ``spans`` (as many for every session) made frames: redrawn sessions straight from
        their latents where the engine has a latent reader, the others through SR and the decoder,
        each group in one batch."""
        lo0, hi0 = spans[0]
        if hi0 <= lo0 or sessions[0].state.latents is None:
            return [[] for _ in sessions]
        for s, (lo, hi) in zip(sessions, spans, strict=True):
            if lo != s.state.counters.published or hi - lo != hi0 - lo0:
                raise RuntimeError(f"publishing latents [{lo}, {hi}) but {s.state.counters.published} is next")
        from_latents = [self.latent_reader is not None and s.redraw is not None for s in sessions]
        frames: list[list[PublishedFrame]] = [[] for _ in sessions]
        for read, publish in ((True, self._drawn_from_latents), (False, self._decoded)):
            rows = [i for i, f in enumerate(from_latents) if f == read]
            if rows:
                made = publish([sessions[i] for i in rows], [spans[i] for i in rows], timings)
                for i, f in zip(rows, made, strict=True):
                    frames[i] = f
        for s, (_, hi), f in zip(sessions, spans, frames, strict=True):
            s.state.counters.published = hi
            s.state.counters.frames += len(f)
        return frames

    def _audio(self, session: StreamSession, lo: int, hi: int) -> np.ndarray:
        """The samples under latents [lo, hi)'s frames."""
        f0, f1 = frame_span(lo, hi - lo, self.config.vae.temporal_down)
        spf = self.config.samples_per_frame
        return session.audio.read(f0 * spf, f1 * spf)

    def _decoded(self, sessions: Sequence[StreamSession], spans: list[tuple[int, int]],
                 timings: dict[str, float]) -> list[list[PublishedFrame]]:
        """Latents through SR and the decoder, once for all; redrawn rows then read their motion
        off the decoded driver frames."""
        states = [s.state for s in sessions]
        with _timed(timings, "sr"):
            lr = torch.stack([st.latents.get(lo, hi) for st, (lo, hi) in zip(states, spans, strict=True)])
            refs = torch.cat([st.reference.hr_latent for st in states])
            seeds = tuple(s.seed * 7919 + lo for s, (lo, _) in zip(sessions, spans, strict=True))
            hr = self.hooks.run("sr", self.sr, SRInput(lr, refs, seeds)).latents
        with _timed(timings, "decode"):
            out = self.hooks.run("decode", self.decode, DecodeInput(
                hr, tuple(lo for lo, _ in spans), DecoderCache.stack([st.decoder for st in states]),
                tuple(self._audio(s, lo, hi) for s, (lo, hi) in zip(sessions, spans, strict=True)),
                tuple(s.frame_limit() for s in sessions),
                tuple(st.latents.origins(lo, hi) for st, (lo, hi) in zip(states, spans, strict=True)),
                tuple(st.last_frame for st in states)))
            caches = out.cache.split([st.reference.decoder for st in states])
        for st, cache, last in zip(states, caches, out.last, strict=True):
            st.decoder, st.last_frame = cache, last
        return self._redrawn(sessions, out.frames, timings)

    def _redraw_stage(self) -> Redraw:
        if self._redraw is None:
            from engine.stages.redraw import Redraw

            self._redraw = Redraw(latent_reader=self.latent_reader)
        return self._redraw

    def _redrawn(self, sessions: Sequence[StreamSession], frames: list[list[PublishedFrame]],
                 timings: dict[str, float]) -> list[list[PublishedFrame]]:
        """The redrawn sessions' driver frames, replaced by their drawers' frames at the same motion."""
        redrawn = [i for i, s in enumerate(sessions) if s.redraw is not None]
        if not redrawn:
            return frames
        with _timed(timings, "redraw"):
            heard = [sessions[i].heard_audio(range(f[0].index, f[-1].index + 1)) if (f := frames[i]) else None
                     for i in redrawn]
            made, states = self._redraw_stage()([frames[i] for i in redrawn], [sessions[i].redraw for i in redrawn],
                                                heard)
        frames = list(frames)
        for i, f, st in zip(redrawn, made, states, strict=True):
            frames[i], sessions[i].redraw = f, st
        return frames

    def _drawn_from_latents(self, sessions: Sequence[StreamSession], spans: list[tuple[int, int]],
                            timings: dict[str, float]) -> list[list[PublishedFrame]]:
        """Redrawn sessions' frames at the motion their latents give: no SR, no decoder."""
        td = self.config.vae.temporal_down
        with _timed(timings, "redraw"):
            stage = self._redraw_stage()
            shown, slots = [], []
            for s, (lo, hi) in zip(sessions, spans, strict=True):
                frames = published_frames(lo, hi - lo, s.frame_limit(), td)
                shown.append(frames)
                slots.append([(g - lo) * td + n - latent_frames(g, td)[0]
                              for n in frames for g in (frame_latent(n, td),)])
            motions, states = stage.read_latents([s.state.latents.get(lo, hi) for s, (lo, hi) in
                                                  zip(sessions, spans, strict=True)], slots,
                                                 [s.redraw for s in sessions])
            out: list[list[PublishedFrame]] = [[] for _ in sessions]
            now = []  # the sessions whose frames are drawn with their chunk
            for i, (s, (lo, hi), frames, st) in enumerate(zip(sessions, spans, shown, states, strict=True)):
                s.redraw = st
                if s.backlog is None:
                    now.append(i)
                    continue
                origins = s.state.latents.origins(lo, hi)
                s.backlog.add(frames.start, motions[i], [origins[frame_latent(n, td) - lo] for n in frames])
            heard = [sessions[i].heard_audio(shown[i]) for i in now]
            images, drawn = stage.draw([motions[i] for i in now], [sessions[i].redraw for i in now], heard)
            for i, made, st in zip(now, images, drawn, strict=True):
                s, (lo, hi) = sessions[i], spans[i]
                s.redraw = st
                out[i] = stamped(shown[i], made, lo, self._audio(s, lo, hi), s.state.latents.origins(lo, hi),
                                 self.config.fps, self.config.audio.sample_rate, td)
        return out

    def _draw(self, sessions: Sequence[StreamSession], most: int,
              timings: dict[str, float]) -> list[list[PublishedFrame]]:
        """Sessions' next drawable frames (``StreamSession.drawable``, at most ``most`` each), drawn at
        their backlogs' motions with the mouths they heard."""
        fps, rate, spf = self.config.fps, self.config.audio.sample_rate, self.config.samples_per_frame
        with _timed(timings, "redraw"):
            shown = [s.drawable(most) for s in sessions]
            taken = [s.backlog.take(f) for s, f in zip(sessions, shown, strict=True)]
            images, states = self._redraw_stage().draw([m for m, _ in taken], [s.redraw for s in sessions],
                                                       [s.heard_audio(f) for s, f in zip(sessions, shown, strict=True)])
        out = []
        for s, frames, (_, chunks), made, st in zip(sessions, shown, taken, images, states, strict=True):
            s.redraw = st
            audio = s.audio.read(frames.start * spf, frames.stop * spf)
            out.append([PublishedFrame(n, fps, image, audio[k * spf:(k + 1) * spf], rate, chunk)
                        for k, (n, image, chunk) in enumerate(zip(frames, made, chunks, strict=True))])
            s.state.counters.frames += len(frames)
            s.finished = s.tail_published and s.backlog.drawn >= (s.frame_limit() or 0)
        return out


@dataclass(frozen=True)
class ChunkWork:
    """A session's next unit of work, read once: the schedule it follows once the chunk ran
    (the quality's interp setting), and ``plan`` None for the end-of-stream publish."""

    key: BatchKey
    plan: ChunkPlan | None
    schedule: ChunkSchedule


class StreamSession(AudioFed):
    """One avatar session's rolling state and schedule position."""

    def __init__(self, pipeline: Pipeline, reference: ReferenceConditioning, seed: int,
                 redraw: RedrawState | None = None, render: Render = Render.DECODED) -> None:
        self.pipe = pipeline
        self.seed = seed
        self.redraw = redraw  # a photo's or drawn avatar's drawer and motion (None: the DiT's frames are shown)
        self.render = render
        self.steps = pipeline.steps_for(render)  # of its N chunks, unless its quality says fewer
        self.audio = AudioBuffer()
        self.state = RollingState(reference=reference, decoder=pipeline.models.decoder.init_cache(reference.decoder))
        self.finished = False
        self.timings: dict[str, float] = {}
        self.last_chunk = ""
        # The schedule it follows now: the interp setting of its last N chunk, and since when.
        self.schedule = pipeline.schedule
        self._quality = Quality(interp=pipeline.config.schedule.interp)
        self._spf = pipeline.config.samples_per_frame
        self._td = pipeline.config.vae.temporal_down
        # A hearing redrawn session's read motion, its frames drawn one by one as their mouths are
        # heard (None: each chunk's frames drawn when it ran); ``tail_published``: no chunk is left.
        self.backlog = MotionBacklog(pipeline.pose_lag) if pipeline.draws_apart(render) else None
        self.tail_published = False

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of this session's frames: its drawer's for a redrawn session."""
        if self.redraw is not None:
            return self.redraw.drawer.size, self.redraw.drawer.size
        return self.pipe.frame_size

    # --- audio in -------------------------------------------------------------------
    def _total_n_chunks(self) -> int | None:
        """N chunks the stream needs, once the input is closed."""
        if not self.audio.closed:
            return None
        frames = -(-self.audio.total // self._spf)
        return -(-latent_count(frames, self._td) // self.pipe.config.schedule.chunk)

    # --- quality ------------------------------------------------------------------------
    @property
    def quality(self) -> Quality:
        """The quality the next chunks run with."""
        return self._quality

    def set_quality(self, quality: Quality) -> None:
        """Takes effect at the next chunk that starts: I chunks on or off and the steps and
        guidance from the next N chunk on (an I chunk the last N chunk already owes still runs).
        Frames stay published exactly once, in order, across any change."""
        self.schedule.switched(quality.interp, self.state.counters.next_n)  # refuses I chunks without seams
        self._quality = quality

    # --- what runs next -----------------------------------------------------------------
    def next_work(self) -> ChunkWork | None:
        """The next chunk under the current quality, or None when nothing can run now."""
        if self.finished:
            return None
        if self.backlog is not None:  # never more frames in one step than a chunk publishes
            frames = self.drawable(self.pipe.frames_per_chunk)
            if frames:
                return ChunkWork(draw_key(self.render, len(frames), self.pipe.batch_engine), None, self.schedule)
            if self.tail_published:
                return None
            if not self.audio.closed and self.backlog.ahead() > self.pipe.frames_per_chunk:
                return None  # the next chunk waits until its motion is a chunk from needed
        quality, c, cfg = self._quality, self.state.counters, self.pipe.config
        schedule = self.schedule
        if c.pending_i is not None:
            plan = schedule.i_chunk(c.pending_i)
            steps, guided = min(self.pipe.steps, cfg.interp_steps), False
        else:
            total = self._total_n_chunks()
            if total is not None and c.next_n >= total:
                return ChunkWork(BatchKey("tail", 0, False, self.pipe.batch_engine, owner=id(self)), None, schedule)
            schedule = schedule.switched(quality.interp, c.next_n)
            plan = schedule.n_chunk(c.next_n)
            needed = self.pipe.context_gen.audio_span(plan.span).samples[1]
            if self.backlog is None:  # the chunk draws its frames: their mouths must be heard
                needed = max(needed, self.heard_needs(plan.publish))
            if not self.audio.closed and self.audio.total < needed:
                return None
            steps, guided = quality.steps or self.steps, quality.guidance and cfg.audio_guidance != 1.0
        s0 = plan.span[0]
        history = ()
        if plan.kind == "N" and self.state.history is not None:
            history = tuple(f - s0 for f in self.state.history.frames())
        lo, hi = plan.publish
        key = BatchKey(plan.kind, steps, guided, self.pipe.batch_engine, plan.span[1] - s0,
                       (plan.generate[0] - s0, plan.generate[1] - s0), history, hi - lo, lo == 0 and hi > lo,
                       schedule.config.interp, render=self.render)
        return ChunkWork(key, plan, schedule)

    @property
    def first_chunk_samples(self) -> int:
        """Audio this session's first frames need before they can be made: their chunk's context's
        lookahead, or their heard mouths' if longer (what a server feeds before its clock starts)."""
        return max(self.pipe.first_chunk_samples, self.heard_needs(self.schedule.n_chunk(0).publish))

    def heard_needs(self, publish: tuple[int, int]) -> int:
        """Samples the heard mouths of latents ``publish``'s frames need before they can be drawn:
        through the tracker's lookahead past the last frame (0 for a session that does not hear)."""
        heard = self.redraw.heard if self.redraw is not None else None
        lo, hi = publish
        if heard is None or hi <= lo:
            return 0
        return frame_span(lo, hi - lo, self._td)[1] * self._spf + heard.lookahead

    @property
    def lookahead_samples(self) -> int:
        """Audio past a frame's end its heard mouth waits for (0 for a session that does not hear):
        audio fed again that far back (``rewrite``) still reaches frames not made yet."""
        heard = self.redraw.heard if self.redraw is not None else None
        return heard.lookahead if heard is not None else 0

    def drawable(self, most: int | None = None) -> range:
        """The next frames a session with a backlog can draw now (at most ``most``): their mouths
        heard and the motions they are drawn at read. Keeping up, that is one frame at a time; behind
        (a busy engine), every frame that is due is drawn in one step."""
        if self.backlog is None or self.redraw is None or self.redraw.heard is None:
            return range(0)
        limit = self.frame_limit()
        heard = limit if limit is not None else max(0, self.audio.total - self.redraw.heard.lookahead) // self._spf
        return self.backlog.drawable(heard, limit, most)

    def heard_audio(self, frames: range) -> Heard | None:
        """A hearing session's audio for the mouths of ``frames``: from what it heard before through
        their lookahead, and whether the stream ends there (None for a session that does not hear)."""
        heard = self.redraw.heard if self.redraw is not None else None
        if heard is None or not len(frames):
            return None
        changed = self.audio.take_changed()
        if changed is not None:
            heard.rewind(changed)
        end = frames[-1] * self._spf + self._spf + heard.lookahead
        final = self.audio.closed and self.audio.total < end
        return self.audio.read(heard.heard, min(end, self.audio.total)), final

    def batch_key(self) -> BatchKey | None:
        """What this session's next chunk shares with others it can run in one batch with;
        None when nothing can run now (``ready()`` is False)."""
        work = self.next_work()
        return work.key if work is not None else None

    @property
    def chunks_run(self) -> int:
        return self.state.counters.chunks

    def ready(self) -> bool:
        return self.next_work() is not None

    # --- one scheduled unit of work ---------------------------------------------------
    # ``Pipeline.step_batch`` runs a chunk over its sessions through the methods below: the
    # session reads its next work, gives its anchors, keeps what was generated, moves past the
    # chunk and releases what no later chunk needs; the pipeline publishes.
    def step(self) -> list[PublishedFrame]:
        """Run the next chunk if it can run; returns the frames that became final."""
        return self.pipe.step_batch([self]).frames[0]

    def anchor_latents(self, plan: ChunkPlan) -> torch.Tensor:
        """An I chunk's span with its clean anchor latents (from the N chunks) in place."""
        (l0, l1), (r0, r1) = plan.anchors
        held = self.state.latents
        anchors = torch.zeros(plan.span[1] - plan.span[0], *held.data.shape[1:], device=held.data.device)
        anchors[: l1 - l0] = held.get(l0, l1)
        anchors[r0 - plan.span[0]:] = held.get(r0, r1)
        return anchors

    def keep_latents(self, plan: ChunkPlan, latents: torch.Tensor) -> None:
        """Hold the latents ``plan`` generated, for its publish and the chunks that anchor on them."""
        g0 = plan.generate[0]
        if self.state.latents is None:
            self.state.latents = LatentWindow(g0, latents[:0], ())
        self.state.latents = self.state.latents.put(g0, latents, plan.name)

    def advance(self, plan: ChunkPlan, schedule: ChunkSchedule) -> None:
        """Past ``plan``: an N chunk fixes the schedule it ran on and may owe the seam before it."""
        c = self.state.counters
        c.chunks += 1
        self.schedule = schedule
        if plan.kind == "N":
            c.next_n += 1
            seam = schedule.i_after(plan.index)
            c.pending_i = seam.index if seam is not None else None
        else:
            c.pending_i = None

    def publish_tail(self, timings: dict[str, float]) -> list[PublishedFrame]:
        """The end of the stream: publish what the last chunks left."""
        c = self.state.counters
        span = self.schedule.tail(c.next_n - 1) if c.next_n else (0, 0)
        frames = self.pipe.publish([self], [span], timings)[0]
        self.state.latents = None
        self.tail_published = True
        self.finished = self.backlog is None or self.backlog.drawn >= (self.frame_limit() or 0)
        return frames

    def release_spent(self) -> None:
        """Drop latents and audio that no later chunk or publish can need."""
        c, schedule = self.state.counters, self.schedule
        keep_latent = c.published
        spans = [schedule.n_chunk(c.next_n).span]
        seam = schedule.i_chunk(c.pending_i) if c.pending_i is not None else schedule.i_after(c.next_n)
        if seam is not None:
            keep_latent = min(keep_latent, seam.span[0])
            spans.append(seam.span)
        if self.state.latents is not None:
            self.state.latents = self.state.latents.drop_before(keep_latent)
        keep_sample = latent_frames(c.published, self._td)[0] * self._spf
        if self.backlog is not None:  # the audio of frames still to draw
            keep_sample = min(keep_sample, self.backlog.drawn * self._spf)
        for span in spans:
            keep_sample = min(keep_sample, self.pipe.context_gen.audio_span(span).samples[0])
        self.audio.release_before(keep_sample)

    def nbytes(self) -> int:
        """Bytes of tensors and audio held between chunks."""
        return self.state.nbytes() + self.audio.nbytes()

    def frames(self) -> AsyncIterator[PublishedFrame]:
        """Async streaming: yields frames as chunks finish; compute runs in a worker thread."""
        return stream_frames(self)
