"""Motion reader: a small CNN that reads the face's motion (jaw, mouth shape, blink, head pose)
from a frame the DiT generated, so a photograph can be warped to do what the generated face does.

The engine keeps generating a stylised driver face from audio (its lip sync, idle motion and
continuity are what the model was trained for); the photo avatar copies that face's motion.
The reader is trained on puppet frames whose parameters are known exactly, across many
identities, poses, blinks and mouth shapes, with blur/noise/colour augmentation so it reads
the softer frames the generator makes. Like the openness probe it also sees the driver's
reference (neutral, mouth closed), which separates a wide mouth at rest from an open one.

Trained by ``avatar train`` (its ``reader`` stage) or ``python -m engine.photo.reader`` (about
100 s of CPU).
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

from engine.eval.probe import HELD_OUT_SEED, augment, mouth_crops, puppet_frames, square
from engine.puppet import FaceState

# Trained by `avatar train` (stage "reader") beside the bundled model; it reads any engine's frames.
READER_PATH = Path(__file__).resolve().parent.parent / "weights" / "tiny" / "motion_reader.safetensors"
FACE_INPUT = 48
# What the reader outputs, in order: FaceState fields, scaled so each spans about [-1, 1].
OUTPUTS: tuple[tuple[str, float], ...] = (
    ("openness", 1.0), ("blink", 1.0), ("wide", 1.0), ("rounded", 1.0),
    ("yaw", 0.3), ("pitch", 0.25), ("roll", 0.15), ("tx", 0.04), ("ty", 0.03),
)
SCALES = torch.tensor([scale for _, scale in OUTPUTS])


def face_crops(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, FACE_INPUT, FACE_INPUT) float in [0, 1]: the whole square frame."""
    x = torch.from_numpy(np.ascontiguousarray(square(np.asarray(frames)))).permute(0, 3, 1, 2).float() / 255.0
    return F.interpolate(x, size=(FACE_INPUT, FACE_INPUT), mode="bilinear", antialias=True, align_corners=False)


def _tower(channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(3), nn.Flatten(),
    )


def _standardised(x: torch.Tensor) -> torch.Tensor:
    crops = x.unflatten(1, (2, 3))
    mean = crops.mean(dim=(2, 3, 4), keepdim=True)
    std = crops.std(dim=(2, 3, 4), keepdim=True).clamp_min(0.02)
    return ((crops - mean) / std).flatten(1, 2)


class MotionReader(nn.Module):
    """Two towers (the mouth crop and the whole face, each beside the reference's) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.mouth = _tower(6)
        self.face = _tower(6)
        self.head = nn.Sequential(nn.Linear(2 * 32 * 9, 64), nn.ReLU(), nn.Linear(64, len(OUTPUTS)))

    def forward(self, mouth: torch.Tensor, face: torch.Tensor) -> torch.Tensor:
        """Scaled outputs (see ``OUTPUTS``) for (N, 6, ., .) frame+reference crop pairs."""
        return self.head(torch.cat([self.mouth(_standardised(mouth)), self.face(_standardised(face))], dim=1))


def reader_dataset(identity_seeds: range, per_identity: int, seed: int) -> tuple[torch.Tensor, ...]:
    frames, refs, states = puppet_frames(identity_seeds, per_identity, seed)
    target = torch.from_numpy(np.array([[getattr(s, name) for name, _ in OUTPUTS] for s in states],
                                       dtype=np.float32)) / SCALES
    mouth = torch.cat([mouth_crops(frames), mouth_crops(refs).repeat_interleave(per_identity, dim=0)], dim=1)
    face = torch.cat([face_crops(frames), face_crops(refs).repeat_interleave(per_identity, dim=0)], dim=1)
    return mouth, face, target


def train_reader(seed: int = 0, out: Path | None = READER_PATH, identities: int = 400, per_identity: int = 8,
                 steps: int = 2000, heldout_identities: int = 40, log: bool = True) -> dict[str, object]:
    """Train from scratch on one thread (deterministic for a seed) and save; returns held-out figures."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(seed, out, identities, per_identity, steps, heldout_identities, log)
    finally:
        torch.set_num_threads(threads)


def _train(seed: int, out: Path | None, identities: int, per_identity: int, steps: int, heldout: int,
           log: bool) -> dict[str, object]:
    t0 = time.process_time()
    torch.manual_seed(seed)
    mouth, face, y = reader_dataset(range(identities), per_identity, seed)
    mv, fv, yv = reader_dataset(range(HELD_OUT_SEED, HELD_OUT_SEED + heldout), 8, seed + 1)
    net = MotionReader()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.15)
    running = 0.0
    for step in range(steps):
        idx = torch.randint(0, y.shape[0], (64,), generator=gen)
        loss = F.smooth_l1_loss(net(augment(mouth[idx], gen), augment(face[idx], gen)), y[idx], beta=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if log and (step + 1) % 250 == 0:
            print(f"reader step {step + 1}/{steps} loss {running / 250:.4f}")
            running = 0.0
    net.eval()
    with torch.no_grad():
        pred = net(mv, fv)
    r = {name: float(np.corrcoef(pred[:, i].numpy(), yv[:, i].numpy())[0, 1]) for i, (name, _) in enumerate(OUTPUTS)}
    report: dict[str, object] = {"seed": seed, "train_frames": int(y.shape[0]), "heldout_frames": int(yv.shape[0]),
                                 "heldout_r": {k: round(v, 4) for k, v in r.items()},
                                 "total_cpu_s": round(time.process_time() - t0, 1)}
    if out is not None:
        meta = {"seed": str(seed), "identities": str(identities), "per_identity": str(per_identity),
                "steps": str(steps), "heldout_r": json.dumps(report["heldout_r"])}
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out), metadata=meta)
        load_reader.cache_clear()
    return report


@functools.lru_cache(maxsize=4)
def load_reader(path: Path = READER_PATH) -> MotionReader:
    """The shipped reader (loaded once per process; read-only)."""
    if not path.exists():
        raise FileNotFoundError(f"no motion reader at {path}; run `python -m engine.photo.reader` to train one")
    net = MotionReader()
    net.load_state_dict(load_file(str(path)))
    net.eval()
    return net


def read_motion(frames: np.ndarray, reference: np.ndarray, reader: MotionReader | None = None) -> list[FaceState]:
    """The face state of each (T, H, W, 3) uint8 frame of a driver face; ``reference`` is its
    neutral image (H, W, 3), or one per frame (T, H, W, 3) when the frames are of several drivers."""
    net = reader or load_reader()
    ref = np.asarray(reference)
    ref = ref[None] if ref.ndim == 3 else ref
    with torch.inference_mode():
        mouth, face = mouth_crops(frames), face_crops(frames)
        n = mouth.shape[0]
        ref_mouth, ref_face = mouth_crops(ref), face_crops(ref)
        if ref_mouth.shape[0] != n:
            ref_mouth, ref_face = ref_mouth.expand(n, -1, -1, -1), ref_face.expand(n, -1, -1, -1)
        values = net(torch.cat([mouth, ref_mouth], dim=1), torch.cat([face, ref_face], dim=1)) * SCALES
    return [FaceState(**{name: float(v) for (name, _), v in zip(OUTPUTS, row, strict=True)})
            for row in values.tolist()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train the motion reader photo avatars copy their motion through")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(READER_PATH))
    args = parser.parse_args(argv)
    print(json.dumps(train_reader(args.seed, Path(args.out)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
