"""``avatar eval`` flags; kept free of heavy imports so ``avatar --help`` stays fast."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``avatar eval`` on the CLI's subparsers (like ``server.cli.add_serve_parser``)."""
    from engine.config import CONFIGS

    p = subparsers.add_parser("eval", help="score lip sync, identity drift, seams and PSNR/SSIM on held-out data")
    p.add_argument("--config", default="tiny", choices=sorted(CONFIGS), help="engine config (default tiny)")
    p.add_argument("--minutes", type=float, default=60.0, help="length of the long identity-drift run (0: skip)")
    p.add_argument("--clips", type=int, default=4, help="held-out clips for lip sync, seams, PSNR/SSIM")
    p.add_argument("--json", default=None, help="write the full result as JSON")
    p.add_argument("--steps", type=int, default=None, help="sampling steps per N chunk, 1-8")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--weights", default=None, help="folder of module checkpoints (default: bundled)")
    p.add_argument("--seed", type=int, default=0, help="picks the held-out identities and sentences")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_eval)
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    if args.clips < 1 or args.minutes < 0:
        print("avatar eval: error: --clips must be >= 1 and --minutes >= 0", file=sys.stderr)
        return 2
    from engine.eval.run import evaluate, format_table
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config(args.config, device=args.device, steps=args.steps, weights=args.weights,
                                threads=args.threads)
    result = evaluate(pipe, clips=args.clips, long_minutes=args.minutes, seed=args.seed, progress=not args.quiet)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.eval.cli ...`` until ``avatar eval`` is wired into the main CLI."""
    parser = argparse.ArgumentParser(prog="avatar")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
