"""AudioToVideo: few-step flow-matching generation of one N or I chunk of low-res latents."""

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


@dataclass(frozen=True)
class A2VInput:
    plan: ChunkPlan
    context: ChunkContext
    reference: KVBlock
    history: KVBlock | None = None  # N chunks: K/V of the previous latent frames
    anchors: torch.Tensor | None = None  # I chunks: (span frames, c, h, w); anchor frames filled


@dataclass(frozen=True)
class A2VOutput:
    latents: torch.Tensor  # (generated frames, c, h, w), float32
    history: KVBlock | None  # N chunks: the new history window


class AudioToVideo:
    def __init__(self, config: EngineConfig, dit: A2VDiT, steps: int | None = None) -> None:
        self.config = config
        self.dit = dit
        self.steps = steps or config.steps

    def _history_pass(self, x0: torch.Tensor, noise: torch.Tensor, audio: torch.Tensor, s0: int,
                      reference: KVBlock, history: KVBlock | None) -> KVBlock:
        """K/V of the chunk's last ``window`` clean frames (at the context noise level), seen
        with the reference only: exactly how the history is built in training."""
        window, f = self.config.dit.window, x0.shape[1]
        first = max(0, f - window)
        start = s0 + first
        t_ctx = torch.full((1, f - first), self.config.context_sigma, device=x0.device)
        x = noised(x0[:, first:], noise[:, first:], self.config.context_sigma)
        _, kv = self.dit(x, t_ctx, audio[:, first:], start, self.dit.context(start, reference, None))
        return KVBlock.concat(history, kv).keep_last_frames(window)

    def _velocity(self, audio: torch.Tensor, silence: torch.Tensor | None, s0: int,
                  ctx: AttnContext) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The sampler's velocity for one chunk: the DiT on this chunk's audio, except that, given
        ``silence`` tokens, the first ``guidance_steps`` calls return the guided mix of it and the
        DiT on silence (both in one batch of two)."""
        g = self.config.audio_guidance

        def plain(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.dit(x, t, audio, s0, ctx)[0]

        if g == 1.0 or silence is None:
            return plain
        pair_audio = torch.cat([audio, silence.to(audio.device).expand_as(audio)])
        pair_ctx = AttnContext(ctx.k.expand(-1, 2, -1, -1, -1), ctx.v.expand(-1, 2, -1, -1, -1), ctx.base)
        calls = itertools.count()

        def guided(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            if next(calls) >= self.config.guidance_steps:
                return plain(x, t)
            v = self.dit(torch.cat([x, x]), torch.cat([t, t]), pair_audio, s0, pair_ctx)[0]
            spoken, silent = v.chunk(2)
            return silent + g * (spoken - silent)

        return guided

    def __call__(self, inp: A2VInput) -> A2VOutput:
        plan, dev = inp.plan, self.dit.device
        s0, s1 = plan.span
        f = s1 - s0
        sigma = self.config.context_sigma
        noise = inp.context.noise.to(dev)
        audio = inp.context.audio_tokens.to(dev)
        fixed = torch.zeros(1, f, dtype=torch.bool, device=dev)
        start = noise
        if plan.kind == "I":
            if inp.anchors is None:
                raise ValueError("I chunks need anchors")
            (l0, l1), (r0, r1) = plan.anchors
            fixed[0, : l1 - s0] = True
            fixed[0, r0 - s0:] = True
            anchors = noised(inp.anchors.to(dev)[None], noise, sigma)
            start = torch.where(fixed[..., None, None, None], anchors, noise)
        history = inp.history if plan.kind == "N" else None
        with torch.inference_mode():
            ctx = self.dit.context(s0, inp.reference, history)
            silence = inp.context.silence_tokens
            # I chunks sit between guided anchors and only smooth the seam; a chunk of pure silence
            # is its own silent prediction, so guiding it would change nothing at twice the cost.
            guided = plan.kind == "N" and silence is not None and not _all_silent(audio, silence)
            velocity = self._velocity(audio, silence if guided else None, s0, ctx)
            steps = self.steps if plan.kind == "N" else min(self.steps, self.config.interp_steps)
            x0 = sample(velocity, start, fixed, sigma, steps, self.config.shift)
            g0, g1 = plan.generate
            out = x0[0, g0 - s0:g1 - s0].float()
            new_history = None
            if plan.kind == "N":
                new_history = self._history_pass(x0, noise, audio, s0, inp.reference, history)
        return A2VOutput(out.cpu(), new_history)


def _all_silent(audio: torch.Tensor, silence: torch.Tensor) -> bool:
    return torch.allclose(audio, silence.to(audio.device).expand_as(audio), atol=1e-5)
