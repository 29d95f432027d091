"""``avatar eval`` flags; kept free of heavy imports so ``avatar --help`` stays fast."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.presets import DEFAULT_PRESET, Preset


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``avatar eval`` on the CLI's subparsers (like ``server.cli.add_serve_parser``)."""
    from engine.cli import add_dtype_option
    from engine.config import CONFIGS

    p = subparsers.add_parser("eval", help="score lip sync, identity drift, seams and PSNR/SSIM on held-out data")
    p.add_argument("--config", default="tiny", choices=sorted(CONFIGS), help="engine config (default tiny)")
    p.add_argument("--minutes", type=float, default=None,
                   help="length of the long identity-drift run (0: skip; default 60, or 10 with --image)")
    p.add_argument("--image", default=None, metavar="PATH",
                   help="score a photo avatar of this image instead (lip sync, upper-face SSIM, seams, fps)")
    p.add_argument("--avatar", default=None, metavar="NAME",
                   help="score a personal avatar (avatar enroll) like a photo: its own mouth from its footage")
    p.add_argument("--real", nargs="?", const="", default=None, metavar="DIR",
                   help="score lip sync against real people's mouths: photo avatars of real talking-head clips "
                        "driven by their own audio, face mesh on both (default DIR: the bundled set)")
    p.add_argument("--clips", type=int, default=4, help="held-out clips for lip sync, seams, PSNR/SSIM")
    p.add_argument("--json", default=None, help="write the full result as JSON")
    p.add_argument("--steps", type=int, default=None, help="sampling steps per N chunk, 1-8")
    p.add_argument("--long-preset", default=DEFAULT_PRESET, choices=list(Preset),
                   help=f"the preset the long run streams through (default {DEFAULT_PRESET}, what sessions get)")
    p.add_argument("--guidance", type=float, default=None,
                   help="audio guidance against silence, 1 = off (default: the config's)")
    p.add_argument("--mouth", default="heard", choices=["heard", "generated"],
                   help="a photo's mouth heard in its audio (default, as served) or the DiT's")
    p.add_argument("--no-deblock", action="store_true",
                   help="turn the temporal deblocking filter off (to see the decoder's own seams)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--weights", default=None, help="folder of module checkpoints (default: bundled)")
    add_dtype_option(p)
    p.add_argument("--seed", type=int, default=0, help="picks the held-out identities and sentences")
    p.add_argument("--frames", default=None, metavar="PNG",
                   help="write ground-truth over generated frames of the first clip as a PNG "
                        "(with --real: every clip's real frames over its generated ones)")
    p.add_argument("--card", action="store_true",
                   help="record the results in the weights folder's model_card.json")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_eval)
    return p


def _pipeline(args: argparse.Namespace):
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config(args.config, device=args.device, steps=args.steps, guidance=args.guidance,
                                weights=args.weights, threads=args.threads, dtype=args.dtype,
                                deblock=() if args.no_deblock else None)
    if isinstance(pipe, Pipeline):
        pipe.heard_mouth = args.mouth == "heard"
    return pipe


def cmd_eval(args: argparse.Namespace) -> int:
    if args.minutes is None:
        args.minutes = 10.0 if args.image or args.avatar else 60.0
    if args.clips < 1 or args.minutes < 0:
        print("avatar eval: error: --clips must be >= 1 and --minutes >= 0", file=sys.stderr)
        return 2
    if args.real is not None:
        return cmd_eval_real(args)
    if args.image or args.avatar:
        return cmd_eval_photo(args)
    from engine.eval.run import evaluate, format_table, update_card

    pipe = _pipeline(args)
    result = evaluate(pipe, clips=args.clips, long_minutes=args.minutes, seed=args.seed, progress=not args.quiet,
                      sheet=Path(args.frames) if args.frames else None, long_preset=args.long_preset)
    command = (f"avatar eval --config {args.config} --clips {args.clips} --minutes {args.minutes:g} "
               + (f"--long-preset {args.long_preset} " if args.minutes > 0 else "")
               + f"--seed {args.seed} --threads {args.threads} --device {args.device}"
               + (f" --steps {args.steps}" if args.steps else "")
               + (f" --dtype {args.dtype}" if args.dtype else "")
               + (f" --guidance {args.guidance:g}" if args.guidance is not None else "")
               + (" --no-deblock" if args.no_deblock else ""))
    return _report(args, pipe, result, format_table(result), update_card, command)


def _report(args: argparse.Namespace, pipe, result: dict, table: str, update, command: str) -> int:
    """Print the table, write ``--json``, and with ``--card`` ``update(card path, result, command)``."""
    from engine.models import WEIGHTS_DIR

    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    if args.card:
        folder = Path(args.weights) if args.weights else WEIGHTS_DIR / pipe.config.name
        update(folder / "model_card.json", result, command)
    return 0


def cmd_eval_photo(args: argparse.Namespace) -> int:
    """``avatar eval --image`` / ``--avatar``: the photo avatar of ``args.image``, or the personal
    avatar ``args.avatar`` from the store, on the ``fast`` preset."""
    from engine.eval.photo import PhotoEvalError, evaluate_photo, format_photo_table, load_photo, update_photo_card
    from engine.personal.store import AvatarStore, StoreError

    try:
        photo = AvatarStore().load(args.avatar) if args.avatar else load_photo(args.image)
    except (PhotoEvalError, StoreError) as exc:
        print(f"avatar eval: error: {exc.reason}", file=sys.stderr)
        return 2
    subject = args.avatar or Path(args.image).name
    pipe = _pipeline(args).preset(Preset.FAST)
    try:
        result = evaluate_photo(pipe, photo, clips=args.clips, minutes=args.minutes, seed=args.seed,
                                progress=not args.quiet, image=subject)
    except PhotoEvalError as exc:
        print(f"avatar eval: error: {exc.reason}", file=sys.stderr)
        return 2
    source = f"--avatar {args.avatar}" if args.avatar else f"--image {subject}"
    command = (f"avatar eval {source} --config {args.config} --clips {args.clips} "
               f"--minutes {args.minutes:g} --seed {args.seed} --threads {args.threads} --device {args.device}"
               + (f" --steps {args.steps}" if args.steps else "")
               + (f" --dtype {args.dtype}" if args.dtype else ""))
    return _report(args, pipe, result, format_photo_table(result), update_photo_card, command)


def cmd_eval_real(args: argparse.Namespace) -> int:
    """``avatar eval --real``: photo avatars of real talking-head clips driven by their own audio,
    their lip gaps against the real ones (``engine.eval.real``), on the ``fast`` preset; beside
    them the bundled drawn avatar, in a session of the same engine and drawn by the puppet."""
    from engine.avatars import DEFAULT_AVATAR
    from engine.eval.real import (
        REAL_DIR,
        DrawnAvatar,
        evaluate_real,
        format_real_table,
        real_clips,
        update_real_card,
    )
    from engine.pipeline import Pipeline
    from engine.puppet import get_identity

    folder = Path(args.real) if args.real else REAL_DIR
    paths = real_clips(folder)
    if not paths:
        print(f"avatar eval: error: no .mp4 clips in {folder}", file=sys.stderr)
        return 2
    pipe = _pipeline(args).preset(Preset.FAST)
    drawn = DrawnAvatar.bundled(pipe, get_identity(DEFAULT_AVATAR)) if isinstance(pipe, Pipeline) else []
    result = evaluate_real(pipe, paths, seed=args.seed, log=(lambda _: None) if args.quiet else print,
                           sheet=Path(args.frames) if args.frames else None, drawn=drawn)
    command = (f"avatar eval --real{' ' + args.real if args.real else ''} --config {args.config} --seed {args.seed} "
               f"--threads {args.threads} --device {args.device} --mouth {args.mouth}"
               + (f" --weights {args.weights}" if args.weights else "")
               + (f" --steps {args.steps}" if args.steps else ""))
    return _report(args, pipe, result, format_real_table(result), update_real_card, command)


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.eval.cli ...`` until ``avatar eval`` is wired into the main CLI."""
    parser = argparse.ArgumentParser(prog="avatar")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
