"""AudioToVideo: few-step flow-matching generation of one N or I chunk of low-res latents,
for one session or a batch of sessions at the same point of their schedules."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.config import EngineConfig
from engine.modules.dit import A2VDiT, AttnContext, KVBlock
from engine.sampler import noised, sample
from engine.schedule import ChunkPlan
from engine.stages.context_gen import ChunkContext
from engine.stages.history import HistoryWindow


@dataclass(frozen=True)
class A2VInput:
    """B rows, one per session. Every row runs ``plan``'s layout: the model sees only positions
    relative to the chunk, so rows from elsewhere on their timelines are given on ``plan``'s
    (their history shifted to it) and get results on it."""

    plan: ChunkPlan
    context: ChunkContext  # B rows
    reference: KVBlock  # B rows
    history: HistoryWindow | None = None  # N chunks: the previous latent frames, B rows
    anchors: torch.Tensor | None = None  # I chunks: (B, span frames, c, h, w), anchor frames filled
    steps: int | None = None  # denoising steps; None: the stage's for this kind of chunk


@dataclass(frozen=True)
class A2VOutput:
    latents: torch.Tensor  # (B, generated frames, c, h, w), float32, on the host unless kept on the device
    history: HistoryWindow | None  # N chunks: the new history window, B rows on ``plan``'s timeline


class AudioToVideo:
    def __init__(self, config: EngineConfig, dit: A2VDiT, steps: int | None = None) -> None:
        self.config = config
        self.dit = dit
        self.steps = steps or config.steps
        # Latents go back to the host after each chunk unless kept on the DiT's device, where SR
        # reads them next (engine.parallel.hygiene, on CUDA: no host synchronisation per chunk).
        self.keep_on_device = False

    def _history_pass(self, x0: torch.Tensor, noise: torch.Tensor, audio: torch.Tensor, s0: int,
                      reference: KVBlock, history: HistoryWindow | None, ctx: AttnContext) -> HistoryWindow:
        """The window of the newest ``window`` frames, this chunk's and the history's before it,
        at the context noise level and seen together with the reference only: exactly how the
        history is built in training. With ``append_history``, a chunk shorter than the window
        appends its own frames instead, seen beside the window (``ctx``, as the chunk was made)."""
        window, (b, f) = self.config.dit.window, x0.shape[:2]
        x = noised(x0, noise, self.config.context_sigma)
        if history is not None and self.config.append_history and f < window:
            t_new = torch.full((b, f), self.config.context_sigma, device=x0.device)
            _, kv = self.dit(x, t_new, audio, s0, ctx, kv_only=True)
            return HistoryWindow(KVBlock.concat(history.kv, kv).newest(window),
                                 torch.cat([history.latents, x], 1)[:, -window:],
                                 torch.cat([history.audio, audio], 1)[:, -window:])
        if history is not None:
            x, audio = torch.cat([history.latents, x], 1), torch.cat([history.audio, audio], 1)
        x, audio = x[:, -window:], audio[:, -window:]
        n = x.shape[1]
        start = s0 + f - n
        t_ctx = torch.full((b, n), self.config.context_sigma, device=x0.device)
        _, kv = self.dit(x, t_ctx, audio, start, self.dit.context(start, reference, None), kv_only=True)
        return HistoryWindow(kv, x, audio)

    def _velocity(self, audio: torch.Tensor, silence: torch.Tensor | None, guided: list[int], s0: int,
                  ctx: AttnContext) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The sampler's velocity for one chunk: the DiT on each row's audio, except that the
        first ``guidance_steps`` calls give the ``guided`` rows the guided mix of it and the DiT
        on ``silence``, all rows and their silent pairs in one batch."""
        g = self.config.audio_guidance

        def plain(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.dit(x, t, audio, s0, ctx)[0]

        if g == 1.0 or silence is None or not guided:
            return plain
        rows, b = torch.tensor(guided, device=audio.device), audio.shape[0]
        pair_audio = torch.cat([audio, silence.to(audio.device)[rows].expand(-1, audio.shape[1], -1, -1)])
        pair_ctx = AttnContext(torch.cat([ctx.k, ctx.k[:, rows]], 1), torch.cat([ctx.v, ctx.v[:, rows]], 1),
                               ctx.base)
        calls = itertools.count()

        def mixed(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            if next(calls) >= self.config.guidance_steps:
                return plain(x, t)
            v = self.dit(torch.cat([x, x[rows]]), torch.cat([t, t[rows]]), pair_audio, s0, pair_ctx)[0]
            spoken, silent = v[:b], v[b:]
            return spoken.index_copy(0, rows, silent + g * (spoken[rows] - silent))

        return mixed

    def __call__(self, inp: A2VInput) -> A2VOutput:
        plan, dev = inp.plan, self.dit.device
        s0 = plan.span[0]
        sigma = self.config.context_sigma
        noise = inp.context.noise.to(dev)
        audio = inp.context.audio_tokens.to(dev)
        fixed = torch.zeros(noise.shape[:2], dtype=torch.bool, device=dev)
        start = noise
        if plan.kind == "I":
            if inp.anchors is None:
                raise ValueError("I chunks need anchors")
            (l0, l1), (r0, r1) = plan.anchors
            fixed[:, : l1 - s0] = True
            fixed[:, r0 - s0:] = True
            anchors = noised(inp.anchors.to(dev), noise, sigma)  # one (F, c, h, w) serves every row
            start = torch.where(fixed[..., None, None, None], anchors, noise)
        history = inp.history if plan.kind == "N" else None
        with torch.inference_mode():
            ctx = self.dit.context(s0, inp.reference, history.kv if history is not None else None)
            silence = inp.context.silence_tokens
            # I chunks sit between guided anchors and only smooth the seam; a row of pure silence
            # is its own silent prediction, so guiding it would change nothing at twice the cost.
            guided = [] if plan.kind != "N" or silence is None else [
                i for i in range(audio.shape[0]) if not _all_silent(audio[i], silence[i])]
            velocity = self._velocity(audio, silence, guided, s0, ctx)
            steps = inp.steps or (self.steps if plan.kind == "N" else min(self.steps, self.config.interp_steps))
            x0 = sample(velocity, start, fixed, sigma, steps, self.config.shift)
            g0, g1 = plan.generate
            out = x0[:, g0 - s0:g1 - s0].float()
            new_history = None
            if plan.kind == "N":
                new_history = self._history_pass(x0, noise, audio, s0, inp.reference, history, ctx)
        return A2VOutput(out if self.keep_on_device else out.cpu(), new_history)


def _all_silent(audio: torch.Tensor, silence: torch.Tensor) -> bool:
    """One row's tokens (F, A, Da) against what silence gives (1, A, Da)."""
    return torch.allclose(audio, silence.to(audio.device).expand_as(audio), atol=1e-5)
