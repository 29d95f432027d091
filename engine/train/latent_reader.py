"""Distilling the latent motion reader (``engine.photo.latent_reader``) from the pixel reader.

The bundled engine speaks generated utterances as each bundled avatar, on both presets; every
published latent is kept with the pixel reader's reading of the frames the decoder makes of it.
The latent reader learns to give those readings from the latents alone. Held-out clips (voices
and sentences training never speaks, ``engine.eval.material``) measure how closely it follows
the pixel reader, output by output.

``python -m engine.train.latent_reader`` collects (about 10 minutes of one CPU core for 16 minutes
of video) and trains (about 3 minutes); ``--data FILE`` keeps the collected set for reruns.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from engine.avatars import avatar_image, avatar_names
from engine.frames import drain
from engine.hooks import PipelineHook
from engine.modules.super_resolution import pool_latents
from engine.modules.vae import latent_frames
from engine.photo.latent_reader import CONTEXT, LATENT_READER_PATH, LatentMotionReader, load_latent_reader, stack_inputs
from engine.photo.reader import OUTPUTS, load_reader, paired_crops, reference_crops
from engine.pipeline import Pipeline
from engine.presets import Preset
from engine.puppet import Identity, reference_image
from engine.stages.super_resolution import SRInput
from engine.train.frame_readers import HELD_OUT_SEED, on_one_thread, save_weights
from engine.train.speech import VOICES, utterance


@dataclass(frozen=True)
class ReaderExamples:
    """Reader inputs, the pixel reader's outputs for each latent's frames, and which frames exist."""

    inputs: torch.Tensor  # (N, (CONTEXT + 2) * c, h, w)
    target: torch.Tensor  # (N, frames, len(OUTPUTS)) scaled outputs
    mask: torch.Tensor  # (N, frames) 1 where the latent has that frame

    @staticmethod
    def cat(sets: list[ReaderExamples]) -> ReaderExamples:
        return ReaderExamples(*(torch.cat([getattr(s, f) for s in sets]) for f in ("inputs", "target", "mask")))

    def save(self, path: Path) -> None:
        save_file({"inputs": self.inputs, "target": self.target, "mask": self.mask}, str(path))

    @staticmethod
    def load(path: Path) -> ReaderExamples:
        t = load_file(str(path))
        return ReaderExamples(t["inputs"], t["target"], t["mask"])


class _Recording(PipelineHook):
    """Keeps every low-res latent super-resolution is given, in order."""

    def __init__(self) -> None:
        self.latents: list[torch.Tensor] = []

    def around(self, name: str, stage: object, inp: SRInput) -> AbstractContextManager[None]:
        if name == "sr":
            self.latents.append(inp.latents[0].clone())
        return nullcontext()


def clip_set(pipe: Pipeline, avatar: str | Identity, pcm: np.ndarray, seed: int) -> ReaderExamples:
    """One utterance spoken as ``avatar`` (bundled, or an identity the DiT may not have seen): its
    latents and the pixel reader's reading of its frames."""
    recording = pipe.hooks.add(_Recording())
    try:
        session = pipe.open_session(avatar, seed=seed)
        session.feed(pcm)
        session.close_input()
        frames = list(drain(session))
    finally:
        pipe.hooks.remove(recording)
    latents = torch.cat(recording.latents).float()
    teacher = load_reader()
    driver = avatar_image(avatar, pipe.frame_size) if isinstance(avatar, str) else reference_image(
        avatar, max(pipe.frame_size))
    refs = reference_crops(driver)
    rgb = np.stack([f.rgb for f in frames])
    with torch.inference_mode():
        read = torch.cat([teacher(*paired_crops(rgb[i:i + 256], refs)) for i in range(0, len(rgb), 256)])
    at = {f.index: i for i, f in enumerate(frames)}
    td = pipe.config.vae.temporal_down
    target = torch.zeros(latents.shape[0], td, len(OUTPUTS))
    mask = torch.zeros(latents.shape[0], td)
    for g in range(latents.shape[0]):
        for j, n in enumerate(range(*latent_frames(g, td))):
            if n in at:
                target[g, j], mask[g, j] = read[at[n]], 1.0
    reference = pool_latents(session.state.reference.hr_latent, pipe.config.dit.lr_factor)[0].float()
    inputs = stack_inputs(latents, torch.zeros(CONTEXT, *latents.shape[1:]), reference)
    return ReaderExamples(inputs, target, mask)


def collect(clips: int, seconds: float, seed: int, voices: tuple[str, ...] = VOICES,
            quality_share: float = 0.25, sampled_share: float = 0.5, identity_seeds: int = 0,
            log: bool = True) -> ReaderExamples:
    """``clips`` utterances of about ``seconds`` each, spoken by the bundled avatars in turn or
    (``sampled_share`` of them) by identities sampled from seeds from ``identity_seeds`` on (training
    identities lie below ``HELD_OUT_SEED``): sessions drive the bundled avatars, evaluation others."""
    base = Pipeline.from_config("tiny", threads=torch.get_num_threads())
    presets = {name: base.preset(name) for name in Preset}
    rng = np.random.default_rng(seed)
    names = avatar_names()
    sets = []
    for i in range(clips):
        preset = Preset.QUALITY if rng.random() < quality_share else Preset.FAST
        avatar: str | Identity = names[i % len(names)]
        if rng.random() < sampled_share:
            avatar = Identity.sample(np.random.default_rng(identity_seeds + i), name=f"latents{identity_seeds + i}")
        pcm = utterance(rng, base.config.audio.sample_rate, voices, seconds).pcm
        sets.append(clip_set(presets[preset], avatar, pcm, seed * 1000 + i))
        if log:
            print(f"latent reader data: clip {i + 1}/{clips} ({preset}, {getattr(avatar, 'name', avatar)}), "
                  f"{sum(len(s.inputs) for s in sets)} latents")
    return ReaderExamples.cat(sets)


def heldout_set(clips: int, seed: int) -> ReaderExamples:
    """Clips in voices and sentences training never speaks."""
    from engine.eval.material import EVAL_VOICES

    return collect(clips, 8.0, seed + 7, EVAL_VOICES, identity_seeds=HELD_OUT_SEED, log=False)


def fit_reader(data: ReaderExamples, steps: int, seed: int, log: bool = True) -> LatentMotionReader:
    """AdamW with a one-cycle schedule, masked smooth L1 with the mouth's openness weighted up."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = LatentMotionReader(channels=data.inputs.shape[1] // (CONTEXT + 2), frames=data.target.shape[1])
    net(data.inputs[:1])  # sizes the lazy layer
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    weight = torch.ones(len(OUTPUTS))
    weight[[i for i, (name, _) in enumerate(OUTPUTS) if name in ("openness", "rounded", "wide", "blink")]] = 3.0
    running = 0.0
    for step in range(steps):
        idx = torch.randint(0, data.inputs.shape[0], (128,), generator=gen)
        x = data.inputs[idx]
        x = x + 0.02 * torch.randn(x.shape, generator=gen)  # sampling noise the DiT's latents carry
        loss = F.smooth_l1_loss(net(x), data.target[idx], beta=0.05, reduction="none")
        loss = (loss * weight * data.mask[idx, :, None]).sum() / (data.mask[idx].sum() * len(OUTPUTS))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if log and (step + 1) % 500 == 0:
            print(f"latent reader step {step + 1}/{steps} loss {running / 500:.4f}")
            running = 0.0
    return net.eval()


def agreement(net: LatentMotionReader, data: ReaderExamples) -> dict[str, float]:
    """Pearson r of each output against the pixel reader's, over every frame that exists."""
    with torch.no_grad():
        pred = net(data.inputs)
    keep = data.mask.bool()
    return {name: round(float(np.corrcoef(pred[keep][:, i].numpy(), data.target[keep][:, i].numpy())[0, 1]), 4)
            for i, (name, _) in enumerate(OUTPUTS)}


def train_latent_reader(seed: int = 0, out: Path | None = LATENT_READER_PATH, clips: int = 96,
                        seconds: float = 10.0, steps: int = 6000, data_path: Path | None = None,
                        log: bool = True) -> dict[str, object]:
    """Collect (or load ``data_path``), train on one thread, save; returns held-out figures."""
    return on_one_thread(lambda: _train(seed, out, clips, seconds, steps, data_path, log))


def _train(seed: int, out: Path | None, clips: int, seconds: float, steps: int, data_path: Path | None,
           log: bool) -> dict[str, object]:
    t0 = time.process_time()
    if data_path is not None and data_path.exists():
        data = ReaderExamples.load(data_path)
    else:
        data = collect(clips, seconds, seed, log=log)
        if data_path is not None:
            data.save(data_path)
    heldout_path = data_path.with_suffix(".heldout.safetensors") if data_path is not None else None
    if heldout_path is not None and heldout_path.exists():
        heldout = ReaderExamples.load(heldout_path)
    else:
        heldout = heldout_set(12, seed)
        if heldout_path is not None:
            heldout.save(heldout_path)
    net = fit_reader(data, steps, seed, log)
    r = agreement(net, heldout)
    report: dict[str, object] = {"seed": seed, "train_latents": int(data.inputs.shape[0]),
                                 "heldout_latents": int(heldout.inputs.shape[0]), "heldout_r": r,
                                 "total_cpu_s": round(time.process_time() - t0, 1)}
    if out is not None:
        save_weights(net, out, {"seed": str(seed), "steps": str(steps), "heldout_r": json.dumps(r)})
        load_latent_reader.cache_clear()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="distil the latent motion reader from the pixel reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clips", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--data", default=None, help="keep the collected set here (reused when it exists)")
    parser.add_argument("--out", default=str(LATENT_READER_PATH))
    args = parser.parse_args(argv)
    report = train_latent_reader(args.seed, Path(args.out), args.clips, args.seconds, args.steps,
                                 Path(args.data) if args.data else None)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
