"""A2V DiT training with the inference code path: reference K/V, a noise-augmented
history window run through the model to get its K/V (N chunks), two-sided clean
anchors (I chunks), per-latent audio windows, flow matching with v-prediction, EMA."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from engine.modules.audio_encoder import AudioEncoder
from engine.modules.dit import A2VDiT
from engine.modules.vae import latent_frames
from engine.sampler import noised
from engine.train.data import mouth_weight
from engine.train.latents import LatentSet

MODES = ("N0", "N", "I")
MODE_WEIGHTS = (0.1, 0.6, 0.3)


@dataclass(frozen=True)
class TrainingBatch:
    mode: str
    ref_lr: torch.Tensor  # (B, c, h, w)
    history: torch.Tensor | None  # (B, W, c, h, w)
    history_mel: torch.Tensor | None  # (B, W, window, bins)
    target: torch.Tensor  # (B, F, c, h, w): the chunk (N) or the whole span (I)
    target_mel: torch.Tensor


def mel_windows(clip_mel: torch.Tensor, mel_start: int, lo: int, hi: int, config) -> torch.Tensor:
    """Audio windows of latents [lo, hi), exactly as ContextGen cuts them at inference."""
    td = config.vae.temporal_down
    mpf = config.samples_per_frame // config.audio.hop
    window = AudioEncoder.mel_window(config)
    ctx = AudioEncoder.mel_before(config)
    rows = [(latent_frames(g, td)[1] - td) * mpf - ctx - mel_start for g in range(lo, hi)]
    return torch.stack([clip_mel[r:r + window] for r in rows])


def sample_batch(data: LatentSet, rng: np.random.Generator, batch: int, mode: str, config,
                 chunk: int | None = None) -> TrainingBatch:
    """``batch`` windows of one mode; N chunks are ``chunk`` latents long (the schedule's chunk
    by default)."""
    s = config.schedule
    w = config.dit.window
    refs, hist, hist_mel, tgt, tgt_mel = [], [], [], [], []
    span = (chunk or s.chunk) if mode != "I" else 2 * (s.seam + s.anchor)
    for _ in range(batch):
        i = int(rng.integers(len(data.clips)))
        clip = data.clips[i]
        lr = data.lr(i)
        n = lr.shape[0]
        if mode == "N0":
            lo = 0
        else:
            first = w if mode == "N" else 1
            lo = int(rng.integers(first, n - span + 1))
        refs.append(F.avg_pool2d(clip.ref_hr[None], data.lr_factor)[0])
        tgt.append(lr[lo:lo + span])
        tgt_mel.append(mel_windows(clip.mel, clip.mel_start, lo, lo + span, config))
        if mode == "N":
            hist.append(lr[lo - w:lo])
            hist_mel.append(mel_windows(clip.mel, clip.mel_start, lo - w, lo, config))
    stack = torch.stack
    return TrainingBatch(mode, stack(refs), stack(hist) if hist else None, stack(hist_mel) if hist_mel else None,
                 stack(tgt), stack(tgt_mel))


def shifted_t(rng: torch.Generator, n: int, shift: float) -> torch.Tensor:
    u = torch.rand(n, generator=rng)
    return shift * u / (1 + (shift - 1) * u)


def flow_loss(dit: A2VDiT, audio: AudioEncoder, b: TrainingBatch, gen: torch.Generator,
              weight: torch.Tensor | None = None) -> torch.Tensor:
    config = dit.config
    s = config.schedule
    w = config.dit.window
    bsz, f = b.target.shape[:2]
    ref_kv = dit.encode_reference(b.ref_lr)
    history = None
    start = w + 1 if b.mode != "N0" else 0
    if b.mode == "N":
        sigma = 0.25 * torch.rand(bsz, 1, generator=gen).expand(bsz, w)
        x_h = noised(b.history, torch.randn(b.history.shape, generator=gen), sigma)
        _, history = dit(x_h, sigma, audio(b.history_mel), start - w, dit.context(start - w, ref_kv, None))
    ctx = dit.context(start, ref_kv, history)
    t = shifted_t(gen, bsz, config.shift)[:, None].expand(bsz, f).clone()
    free = torch.ones(bsz, f, dtype=torch.bool)
    if b.mode == "I":
        free[:, : s.anchor] = False
        free[:, f - s.anchor:] = False
        t[~free] = (0.25 * torch.rand(bsz, 1, generator=gen)).expand(bsz, f)[~free]
    noise = torch.randn(b.target.shape, generator=gen)
    x_t = noised(b.target, noise, t)
    v, _ = dit(x_t, t, audio(b.target_mel), start, ctx)
    sq = (v - (noise - b.target)).pow(2)
    err = (sq * weight).mean(dim=(2, 3, 4)) if weight is not None else sq.mean(dim=(2, 3, 4))
    return err[free].mean()


def train_chunks(config) -> tuple[int, ...]:
    """N-chunk lengths trained: every length up to the schedule's chunk, so one model serves the
    low-latency schedule (one latent a chunk) and the long chunks of the quality preset alike."""
    return tuple(range(1, config.schedule.chunk + 1))


def train_dit(dit: A2VDiT, audio: AudioEncoder, data: LatentSet, steps: int, seed: int,
              batch: int = 8, lr: float = 4e-4, ema_decay: float = 0.998, mouth_extra: float = 4.0) -> list[float]:
    config = dit.config
    chunks = train_chunks(config)
    weight = mouth_weight(*data.lr(0).shape[-2:], mouth_extra)
    weight = weight / weight.mean()
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    params = list(dit.parameters()) + list(audio.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.03)
    ema = [copy.deepcopy(m).requires_grad_(False) for m in (dit, audio)]
    dit.train()
    audio.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="dit", unit="step")
    for step in bar:
        mode = str(rng.choice(MODES, p=MODE_WEIGHTS))
        chunk = int(rng.choice(chunks))
        loss = flow_loss(dit, audio, sample_batch(data, rng, batch, mode, config, chunk), gen, weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        decay = min(ema_decay, (1 + step) / (10 + step))
        with torch.no_grad():
            for e, m in zip(ema, (dit, audio), strict=True):
                for pe, pm in zip(e.parameters(), m.parameters(), strict=True):
                    pe.lerp_(pm, 1 - decay)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
    for e, m in zip(ema, (dit, audio), strict=True):
        m.load_state_dict(e.state_dict())
        m.eval()
    return losses
