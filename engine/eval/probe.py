"""Mouth-openness probe: a tiny CNN that reads how far the lips part from a video frame.

Lip sync is scored on pixels, not on the model's internals, so any engine (the puppet,
the trained model, a future one) is measured the same way. The probe is trained on
puppet frames whose openness is known exactly, across many sampled identities, head
poses, blinks and mouth shapes, with blur/noise/colour augmentation so it also reads
the softer frames a generative model produces. It also sees the avatar's reference
(neutral, mouth closed): how wide this identity's mouth is at rest separates a wide
"ee" from an open "aa" that is equally tall, which no single frame can. Identities come from seeds below
``HELD_OUT_SEED``; evaluation uses seeds at or above it, so the probe is always scored
on faces it never saw.

Regenerate the shipped weights with ``python -m engine.eval.probe`` (about 35 s of CPU).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from engine.puppet import FaceState, Identity, reference_image, render

PROBE_PATH = Path(__file__).with_name("openness.safetensors")
HELD_OUT_SEED = 10_000  # identity seeds >= this are never used for training anything in eval
RENDER_SIZE = 256
# Mouth region as fractions of a square frame: (top, bottom, left, right). It covers the
# mouth under every pose the puppet's face tracks produce, plus the chin (jaw drop).
CROP = (0.42, 0.77, 0.33, 0.67)
INPUT = 32


def square(frames: np.ndarray) -> np.ndarray:
    """Centre-crop (T, H, W, 3) frames to square, the way the pipeline crops its reference."""
    h, w = frames.shape[1:3]
    if h == w:
        return frames
    s = min(h, w)
    y, x = (h - s) // 2, (w - s) // 2
    return frames[:, y : y + s, x : x + s]


def region_crops(frames: np.ndarray, region: tuple[float, float, float, float],
                 size: tuple[int, int]) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, *size) float in [0, 1]: ``region`` (top, bottom, left, right,
    fractions of the square frame), any frame size."""
    frames = square(np.asarray(frames))
    s = frames.shape[1]
    t, b, left, r = (round(f * s) for f in region)
    x = torch.from_numpy(np.ascontiguousarray(frames[:, t:b, left:r])).permute(0, 3, 1, 2).float() / 255.0
    return F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)


def mouth_crops(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, INPUT, INPUT) float in [0, 1]: the mouth region, any frame size."""
    return region_crops(frames, CROP, (INPUT, INPUT))


class OpennessNet(nn.Module):
    """Three strided convs and a small head (~25k weights), cheap enough to train in seconds.

    Input: the frame's mouth crop and the reference's, stacked (6 channels). Each crop is
    standardised on its own first, so skin and lip colour matter less than shape.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(6, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
        )
        side = INPUT // 8
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * side * side, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        crops = x.unflatten(1, (2, 3))
        mean = crops.mean(dim=(2, 3, 4), keepdim=True)
        std = crops.std(dim=(2, 3, 4), keepdim=True).clamp_min(0.02)
        return self.head(self.features(((crops - mean) / std).flatten(1, 2))).squeeze(1)


def sample_state(rng: np.random.Generator) -> FaceState:
    """A random face state spanning (and a little beyond) what ``face_track_from_audio`` produces."""
    o = 0.0 if rng.random() < 0.2 else float(rng.uniform(0.0, 1.0))
    active = min(o / 0.25, 1.0)
    shape = rng.dirichlet([0.6, 0.6, 0.6]) * active
    return FaceState(
        openness=o,
        closed=1.0 - active,
        open=float(shape[0]),
        rounded=float(shape[1]),
        wide=float(shape[2]),
        blink=float(rng.uniform(0.0, 1.0)) if rng.random() < 0.2 else 0.0,
        yaw=float(np.clip(rng.normal(0.0, 0.1), -0.3, 0.3)),
        pitch=float(np.clip(rng.normal(0.0, 0.08), -0.25, 0.25)),
        roll=float(np.clip(rng.normal(0.0, 0.05), -0.15, 0.15)),
        tx=float(np.clip(rng.normal(0.0, 0.015), -0.04, 0.04)),
        ty=float(np.clip(rng.normal(0.0, 0.01), -0.03, 0.03)),
        brow=float(rng.uniform(-0.6, 1.0)),
        gaze_x=float(rng.uniform(-0.6, 0.6)),
        gaze_y=float(rng.uniform(-0.4, 0.4)),
    )


def puppet_frames(identity_seeds: range, per_identity: int, seed: int,
                  size: int = RENDER_SIZE) -> tuple[np.ndarray, np.ndarray, list[FaceState]]:
    """Puppet frames of random states: (N, S, S, 3) frames, (identities, S, S, 3) references
    (frame i is of identity i // per_identity) and the N states drawn."""
    rng = np.random.default_rng(seed)
    n = len(identity_seeds) * per_identity
    frames = np.empty((n, size, size, 3), dtype=np.uint8)
    refs = np.empty((len(identity_seeds), size, size, 3), dtype=np.uint8)
    states: list[FaceState] = []
    for k, s in enumerate(identity_seeds):
        ident = Identity.sample(np.random.default_rng(s), name=f"probe{s}")
        refs[k] = reference_image(ident, size)
        for j in range(per_identity):
            states.append(sample_state(rng))
            frames[k * per_identity + j] = render(ident, states[-1], size)
    return frames, refs, states


def probe_dataset(identity_seeds: range, per_identity: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(frame crop, reference crop) pairs of 256x256 puppet frames and their true openness."""
    frames, refs, states = puppet_frames(identity_seeds, per_identity, seed)
    target = np.array([s.openness for s in states], dtype=np.float32)
    ref_crops = mouth_crops(refs).repeat_interleave(per_identity, dim=0)
    return torch.cat([mouth_crops(frames), ref_crops], dim=1), torch.from_numpy(target)


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Blur (down-up resampling), colour gain and noise on the frame crop only: what a
    generator's frames look like next to the clean reference it was given."""
    n, (h, w) = x.shape[0], x.shape[-2:]
    frame, ref = x[:, :3], x[:, 3:]
    blur = torch.rand(n, generator=gen) < 0.5
    if blur.any():
        k = int(torch.randint(w // 3, w, (1,), generator=gen))
        soft = F.interpolate(frame[blur], size=(max(1, k * h // w), k), mode="bilinear", antialias=True,
                             align_corners=False)
        frame = frame.clone()
        frame[blur] = F.interpolate(soft, size=(h, w), mode="bilinear", align_corners=False)
    gain = 1.0 + 0.08 * torch.randn(n, 3, 1, 1, generator=gen)
    noise = 0.03 * torch.rand(n, 1, 1, 1, generator=gen) * torch.randn(frame.shape, generator=gen)
    return torch.cat([(frame * gain + noise).clamp(0.0, 1.0), ref], dim=1)


def fit(net: nn.Module, inputs: list[torch.Tensor], target: torch.Tensor, steps: int, seed: int,
        name: str | None = None, log_every: int = 200) -> nn.Module:
    """Train a small reader of frame crops (``net(*inputs)`` against ``target``, smooth L1) with
    ``augment`` on every input, AdamW and a one-cycle schedule, deterministic for ``seed``;
    ``name`` prints the running loss. Returns ``net`` in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.15)
    running = 0.0
    for step in range(steps):
        idx = torch.randint(0, target.shape[0], (64,), generator=gen)
        loss = F.smooth_l1_loss(net(*(augment(t[idx], gen) for t in inputs)), target[idx], beta=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if name and (step + 1) % log_every == 0:
            print(f"{name} step {step + 1}/{steps} loss {running / log_every:.4f}")
            running = 0.0
    return net.eval()


def train_openness_probe(
    seed: int = 0, out: Path | None = PROBE_PATH, identities: int = 400, per_identity: int = 6,
    steps: int = 1000, heldout_identities: int = 40, log: bool = True,
) -> dict[str, float | int]:
    """Train the probe from scratch (deterministic for a seed) and save it; returns held-out errors.

    Runs on one thread: the result then does not depend on the machine's core count, and
    it leaves the other core to whatever else is running (~35 s of CPU in all).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(seed, out, identities, per_identity, steps, heldout_identities, log)
    finally:
        torch.set_num_threads(threads)


def _train(
    seed: int, out: Path | None, identities: int, per_identity: int, steps: int, heldout: int, log: bool
) -> dict[str, float | int]:
    t0 = time.process_time()
    torch.manual_seed(seed)
    x, y = probe_dataset(range(identities), per_identity, seed)
    xv, yv = probe_dataset(range(HELD_OUT_SEED, HELD_OUT_SEED + heldout), 8, seed + 1)
    t_data = time.process_time() - t0
    net = fit(OpennessNet(), [x], y, steps, seed, "probe" if log else None, log_every=200)
    with torch.no_grad():
        pred = net(xv).clamp(0.0, 1.0)
    report = {
        "seed": seed,
        "train_frames": int(x.shape[0]),
        "heldout_frames": int(xv.shape[0]),
        "heldout_mae": float((pred - yv).abs().mean()),
        "heldout_r": float(np.corrcoef(pred.numpy(), yv.numpy())[0, 1]),
        "data_cpu_s": t_data,
        "total_cpu_s": time.process_time() - t0,
    }
    if out is not None:
        meta = {"seed": str(seed), "identities": str(identities), "per_identity": str(per_identity),
                "steps": str(steps), "heldout_identities": str(heldout), "crop": json.dumps(CROP), "input": str(INPUT),
                "heldout_mae": f"{report['heldout_mae']:.4f}", "heldout_r": f"{report['heldout_r']:.4f}"}
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out), metadata=meta)
        load_probe.cache_clear()
    return report


@functools.lru_cache(maxsize=4)
def load_probe(path: Path = PROBE_PATH) -> OpennessNet:
    """The shipped probe (loaded once per process; it is read-only)."""
    if not path.exists():
        raise FileNotFoundError(f"no openness probe at {path}; run `python -m engine.eval.probe` to train one")
    net = OpennessNet()
    net.load_state_dict(load_file(str(path)))
    net.eval()
    return net


def measure_openness(
    frames: np.ndarray, reference: np.ndarray, probe: OpennessNet | None = None, batch: int = 256
) -> np.ndarray:
    """Mouth openness read from each frame of a (T, H, W, 3) uint8 video, (T,) float32 in [0, 1].

    ``reference`` is the avatar's neutral image (H', W', 3), the one the video was made from.
    """
    net = probe or load_probe()
    ref = mouth_crops(np.asarray(reference)[None])
    out = np.empty(len(frames), dtype=np.float32)
    with torch.inference_mode():
        for i in range(0, len(frames), batch):
            crops = mouth_crops(frames[i : i + batch])
            x = torch.cat([crops, ref.expand(crops.shape[0], -1, -1, -1)], dim=1)
            out[i : i + batch] = net(x).clamp(0.0, 1.0).numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train the mouth-openness probe used by `avatar eval`")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(PROBE_PATH))
    args = parser.parse_args(argv)
    report = train_openness_probe(args.seed, Path(args.out))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
