"""The ``avatar`` command: render, bench, and commands other packages register
(``avatar.commands`` entry points, e.g. ``serve`` from the server package)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from importlib.metadata import entry_points

from engine.config import CONFIGS
from engine.media.audio_io import MediaError, load_audio
from engine.media.image import load_image


class CliError(Exception):
    """A user-facing failure: printed as one line, no traceback."""


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="tiny", choices=sorted(CONFIGS), help="engine config (default tiny)")
    p.add_argument("--steps", type=int, default=None, help="sampling steps per N chunk, 1-8")
    p.add_argument("--guidance", type=float, default=None,
                   help="audio guidance against silence, 1 = off (default: the config's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--no-interp", action="store_true", help="switch the I-chunk seam pass off")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--weights", default=None, help="folder of module checkpoints (default: bundled)")
    add_dtype_option(p)
    p.add_argument("--seed", type=int, default=0)


def add_dtype_option(p: argparse.ArgumentParser) -> None:
    """``--dtype``, shared by every command that builds a learned pipeline."""
    p.add_argument("--dtype", default=None, choices=("auto", "float32", "bfloat16"),
                   help="compute dtype of the DiT, SR and decoder (default: the config's, auto: bf16 on CUDA "
                        "and on CPUs where it is faster)")


def _refuse_xl_off_cuda(args: argparse.Namespace) -> None:
    if args.config == "xl" and not args.device.startswith("cuda"):
        raise CliError("xl is 14B-shaped (57 GB of fp32 weights): it runs on CUDA devices only")


def _pipeline(args: argparse.Namespace):  # Pipeline is imported lazily so --help stays fast
    from engine.pipeline import Pipeline

    _refuse_xl_off_cuda(args)

    if args.steps is not None and not 1 <= args.steps <= 8:
        raise CliError(f"--steps must be in 1..8, got {args.steps}")
    try:
        return Pipeline.from_config(args.config, device=args.device, steps=args.steps, guidance=args.guidance,
                                    interp=not args.no_interp, weights=args.weights, threads=args.threads,
                                    dtype=args.dtype)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CliError(str(exc).strip("'\"")) from None


def _personal(args: argparse.Namespace):
    """The photo avatar ``--avatar`` names (a bundled portrait, or a personal avatar ``avatar enroll``
    made), or None for a drawn bundled one."""
    from engine.avatars import avatar_names
    from engine.portraits import portrait_avatar, portrait_names

    if not args.avatar or args.avatar in avatar_names():
        return None
    if args.avatar in portrait_names():
        return portrait_avatar(args.avatar)
    from engine.personal.store import AvatarStore, StoreError

    bundled = avatar_names() + portrait_names()
    store = AvatarStore(args.store, reserved=tuple(bundled))
    try:
        return store.load(args.avatar)
    except StoreError as exc:
        raise CliError(f"unknown avatar {args.avatar!r}: not bundled ({', '.join(bundled)}) "
                       f"and {exc.reason} in {store.root}") from None


def cmd_render(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.face.checks import FaceError
    from engine.frames import drain
    from engine.media.mp4 import Mp4Writer
    from engine.pipeline import Pipeline

    if args.image and args.avatar:
        raise CliError("give either --avatar or --image, not both")
    if args.drawn and args.image:
        raise CliError("--drawn draws a bundled avatar; a photo's frames are always its own pixels")
    image = load_image(args.image) if args.image else None
    photo = _personal(args)
    pipe = _pipeline(args)
    if args.drawn and not isinstance(pipe, Pipeline):
        raise CliError(f"--drawn needs a learned engine; --config {args.config} draws with the renderer already")
    drawn = {"drawn": True} if args.drawn else {}
    pcm = load_audio(args.audio, pipe.sample_rate)
    try:  # the session opens here: an unknown avatar, or a photo without a usable face, fails now
        session = pipe.open_session(avatar=None if photo else args.avatar, image=image, photo=photo, seed=args.seed,
                                    **drawn)
    except FaceError as exc:
        raise CliError(f"{args.image}: {exc}") from None
    except (KeyError, ValueError) as exc:
        raise CliError(str(exc).strip("'\"")) from None
    session.feed(pcm)
    session.close_input()
    frames = drain(session)
    total = math.ceil(pcm.size / pipe.config.samples_per_frame)
    h, w = session.frame_size
    with Mp4Writer(args.out, w, h, pipe.fps, pipe.sample_rate) as writer:
        with tqdm(total=total, unit="frame", desc="render", disable=args.quiet) as bar:
            for frame in frames:
                writer.write(frame)
                bar.update(1)
    if not args.quiet:
        print(f"wrote {args.out}: {writer.frames} frames, {writer.frames / pipe.fps:.2f} s at {pipe.fps} fps")
    return 0


def _plan(args: argparse.Namespace):
    """The devices ``avatar bench`` spreads the engine over; None: one device, as always."""
    from engine.parallel.plan import ParallelPlan

    try:
        plan = ParallelPlan(sequence=args.sequence_parallel, pipeline=args.pipeline_parallel, shard=args.shard,
                            offload=args.offload, decoder_device=args.decoder_device)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return None if plan.single else plan


def _hygiene(args: argparse.Namespace) -> tuple[str, ...]:
    from engine.parallel.hygiene import FEATURES

    if not args.hygiene:
        return ()
    names = FEATURES if args.hygiene == "all" else tuple(x for x in args.hygiene.split(",") if x)
    if unknown := sorted(set(names) - set(FEATURES)):
        raise CliError(f"--hygiene: unknown {', '.join(unknown)}; choose all or from {', '.join(FEATURES)}")
    return names


def cmd_bench(args: argparse.Namespace) -> int:
    from engine.bench import format_result, run_bench, write_json

    _refuse_xl_off_cuda(args)
    plan, hygiene = _plan(args), _hygiene(args)
    checkpoints = tuple(int(x) for x in args.checkpoints.split(",")) if args.checkpoints else ()
    if plan is not None:
        if args.sessions or hygiene:
            raise CliError("--sessions and --hygiene run on one device: not with the multi-device flags")
        return _bench_parallel(plan, args, checkpoints)
    if not args.sessions and (args.render != "decoded" or args.preset != "quality"):
        raise CliError("--render and --preset go with --sessions")
    pipe = _pipeline(args)
    if args.sessions:
        return _bench_sessions(pipe, args)
    from engine.parallel.hygiene import apply_hygiene

    applied = apply_hygiene(pipe, hygiene)
    result = dataclasses.replace(run_bench(pipe, seconds=args.seconds, chunks=args.chunks, checkpoints=checkpoints),
                                 hygiene=list(applied))
    print(format_result(result))
    if args.json:
        write_json(result, args.json)
    return 0


def _bench_parallel(plan, args: argparse.Namespace, checkpoints: tuple[int, ...]) -> int:
    from engine.parallel.bench import format_parallel, run_parallel_bench, write_parallel_json

    threads = args.threads
    if not args.device.startswith("cuda"):  # ranks on one CPU share its cores
        threads = max(1, args.threads // plan.world_size)
    build = dict(name=args.config, steps=args.steps, guidance=args.guidance, interp=not args.no_interp,
                 weights=args.weights, threads=threads)
    try:
        result, figures = run_parallel_bench(plan, build, args.device, args.seconds, args.chunks, checkpoints,
                                             single_threads=args.threads, compare=args.config != "xl")
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CliError(str(exc).strip("'\"")) from None
    print(format_parallel(result, figures))
    if args.json:
        write_parallel_json(result, figures, args.json)
    return 0


def _bench_sessions(pipe, args: argparse.Namespace) -> int:
    from engine.batch import Render
    from engine.pipeline import warm_up
    from engine.service.bench import format_sessions, run_sessions_bench, write_sessions_json

    try:
        counts = [int(x) for x in args.sessions.split(",")]
    except ValueError:
        raise CliError(f"--sessions takes counts like 1,2,4, not {args.sessions!r}") from None
    if not counts or min(counts) < 1:
        raise CliError("--sessions needs counts of at least 1")
    seconds = args.seconds if args.seconds_given else 10.0
    warm_up(pipe)
    results = [run_sessions_bench(pipe, n, batched=not args.no_batch, seconds=seconds, render=Render(args.render),
                                  preset=args.preset) for n in counts]
    print(format_sessions(results))
    if args.json:
        write_sessions_json(results, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="avatar", description="Real-time streaming talking-avatar engine")
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="render an audio file to an MP4 (H.264 + AAC)")
    render.add_argument("--audio", required=True, help="wav/flac/mp3/ogg, any rate, mono or stereo")
    render.add_argument("--out", required=True, help="output .mp4")
    render.add_argument("--avatar", default=None,
                        help="bundled (drawn, or a real portrait) or personal (avatar enroll) avatar name")
    render.add_argument("--store", default=None, help="the personal avatars' store (default: AVATAR_STORE)")
    render.add_argument("--image", default=None, help="reference image of the avatar")
    render.add_argument("--drawn", action="store_true",
                        help="draw the bundled avatar with its renderer at the generated motion (sharp) "
                             "instead of showing the decoder's frames")
    render.add_argument("--quiet", action="store_true")
    _engine_args(render)
    render.set_defaults(func=cmd_render)

    bench = sub.add_parser("bench", help="measure first frame, fps, real-time factor, memory")
    bench.add_argument("--seconds", type=float, default=None, help="seconds of audio to generate (60; 10 a session "
                       "with --sessions)")
    bench.add_argument("--sessions", default=None, help="N concurrent sessions through one worker, e.g. 1,2,4")
    bench.add_argument("--no-batch", action="store_true", help="with --sessions: one session per forward")
    bench.add_argument("--render", default="decoded", choices=("decoded", "drawn", "photo"),
                       help="with --sessions: the sessions' frames decoded, drawn (bundled avatars drawn at the "
                            "motion read off the DiT), or photo (the default avatar's portrait as a photo)")
    bench.add_argument("--preset", default="quality", choices=("quality", "fast"),
                       help="with --sessions: the sessions' preset (default quality)")
    bench.add_argument("--chunks", type=int, default=None, help="run this many N chunks instead")
    bench.add_argument("--checkpoints", default="", help="report fps/memory after these chunk counts, e.g. 10,200")
    bench.add_argument("--json", default=None, help="write the result as JSON")
    bench.add_argument("--sequence-parallel", type=int, default=1, metavar="N",
                       help="split every chunk's tokens over N ranks (Ulysses attention)")
    bench.add_argument("--pipeline-parallel", type=int, default=1, metavar="N",
                       help="the DiT's blocks in N stages on N ranks, rebalanced from measured block times")
    bench.add_argument("--shard", type=int, default=1, metavar="N", help="shard the DiT's blocks over N ranks (FSDP2)")
    bench.add_argument("--offload", action="store_true",
                       help="modules in pinned CPU memory, each block fetched just before it runs")
    bench.add_argument("--decoder-device", default=None, metavar="DEV",
                       help="SR and the decoder on DEV, decoding behind the DiT")
    bench.add_argument("--hygiene", default="", metavar="LIST",
                       help="CUDA only: all or some of resident,fused,compile,graphs (see engine.parallel.hygiene)")
    _engine_args(bench)
    bench.set_defaults(func=cmd_bench)

    from engine.personal.cli import add_personal_parsers
    from engine.train.run import add_train_parser

    add_personal_parsers(sub)
    add_train_parser(sub)
    for ep in entry_points(group="avatar.commands"):
        ep.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        args.seconds_given = args.seconds is not None
        args.seconds = args.seconds if args.seconds is not None else 60.0
    try:
        return int(args.func(args) or 0)
    except (CliError, MediaError, RuntimeError) as exc:
        print(f"avatar {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"avatar {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
