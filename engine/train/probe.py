"""Training the mouth-openness probe that ``avatar eval`` scores lip sync with (``engine.eval.probe``).

``python -m engine.train.probe`` regenerates the shipped weights (about 35 s of CPU).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from engine.eval.probe import PROBE_PATH, OpennessNet, load_probe
from engine.photo.crops import CROP, INPUT, mouth_crops
from engine.train.frame_readers import HELD_OUT_SEED, fit, on_one_thread, puppet_frames, save_weights


def probe_dataset(identity_seeds: range, per_identity: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(frame crop, reference crop) pairs of 256x256 puppet frames and their true openness."""
    frames, refs, states = puppet_frames(identity_seeds, per_identity, seed)
    target = np.array([s.openness for s in states], dtype=np.float32)
    ref_crops = mouth_crops(refs).repeat_interleave(per_identity, dim=0)
    return torch.cat([mouth_crops(frames), ref_crops], dim=1), torch.from_numpy(target)


def train_openness_probe(
    seed: int = 0, out: Path | None = PROBE_PATH, identities: int = 400, per_identity: int = 6,
    steps: int = 1000, heldout_identities: int = 40, log: bool = True,
) -> dict[str, float | int]:
    """Train the probe from scratch on one thread (deterministic for a seed) and save it; returns
    held-out errors (~35 s of CPU in all)."""
    return on_one_thread(lambda: _train(seed, out, identities, per_identity, steps, heldout_identities, log))


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
        save_weights(net, out, meta)
        load_probe.cache_clear()
    return report


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
