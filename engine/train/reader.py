"""Training the motion reader that photo avatars copy their motion through (``engine.photo.reader``).

``avatar train`` runs it as its ``reader`` stage; ``python -m engine.train.reader`` alone (about
100 s of CPU).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from engine.photo.reader import OUTPUTS, READER_PATH, SCALES, MotionReader, load_reader, paired_crops
from engine.train.frame_readers import HELD_OUT_SEED, fit, on_one_thread, puppet_frames, save_weights


def reader_dataset(identity_seeds: range, per_identity: int, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each tower's (frame crop, reference crop) pairs of puppet frames, and their true (scaled) states."""
    frames, refs, states = puppet_frames(identity_seeds, per_identity, seed)
    target = torch.from_numpy(np.array([[getattr(s, name) for name, _ in OUTPUTS] for s in states],
                                       dtype=np.float32)) / SCALES
    return paired_crops(frames, refs, per_identity), target


def train_reader(seed: int = 0, out: Path | None = READER_PATH, identities: int = 800, per_identity: int = 8,
                 steps: int = 3000, heldout_identities: int = 40, log: bool = True) -> dict[str, object]:
    """Train from scratch on one thread (deterministic for a seed) and save; returns held-out figures."""
    return on_one_thread(lambda: _train(seed, out, identities, per_identity, steps, heldout_identities, log))


def _train(seed: int, out: Path | None, identities: int, per_identity: int, steps: int, heldout: int,
           log: bool) -> dict[str, object]:
    t0 = time.process_time()
    torch.manual_seed(seed)
    x, y = reader_dataset(range(identities), per_identity, seed)
    xv, yv = reader_dataset(range(HELD_OUT_SEED, HELD_OUT_SEED + heldout), 8, seed + 1)
    net = fit(MotionReader(), x, y, steps, seed, "reader" if log else None, log_every=250)
    with torch.no_grad():
        pred = net(*xv)
    r = {name: float(np.corrcoef(pred[:, i].numpy(), yv[:, i].numpy())[0, 1]) for i, (name, _) in enumerate(OUTPUTS)}
    report: dict[str, object] = {"seed": seed, "train_frames": int(y.shape[0]), "heldout_frames": int(yv.shape[0]),
                                 "heldout_r": {k: round(v, 4) for k, v in r.items()},
                                 "total_cpu_s": round(time.process_time() - t0, 1)}
    if out is not None:
        meta = {"seed": str(seed), "identities": str(identities), "per_identity": str(per_identity),
                "steps": str(steps), "heldout_r": json.dumps(report["heldout_r"])}
        save_weights(net, out, meta)
        load_reader.cache_clear()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train the motion reader photo avatars copy their motion through")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(READER_PATH))
    args = parser.parse_args(argv)
    print(json.dumps(train_reader(args.seed, Path(args.out)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
