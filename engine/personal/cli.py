"""``avatar enroll`` and ``avatar avatars list|rm``: personal avatars from the command line."""

from __future__ import annotations

import argparse
import json


class PersonalCliError(RuntimeError):
    """One line for the person at the command line (``avatar`` prints it and exits 2)."""


def _store(args: argparse.Namespace):
    from engine.avatars import avatar_names
    from engine.personal.store import AvatarStore

    return AvatarStore(args.store, reserved=tuple(avatar_names()))


def cmd_enroll(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.personal.enroll import EnrollError, enroll
    from engine.personal.store import StoreError

    store = _store(args)
    try:
        store.check_name(args.name)
        if args.name in store:
            raise StoreError(f"an avatar named {args.name!r} exists already", 409)
        with tqdm(total=100, unit="%", desc="enrol", disable=args.quiet) as bar:
            def progress(fraction: float, _stage: str) -> None:
                bar.update(max(int(fraction * 100) - bar.n, 0))

            avatar, report = enroll(args.video, progress)
        meta = store.save(args.name, avatar, report)
    except (EnrollError, StoreError) as exc:
        raise PersonalCliError(f"{args.video}: {exc.reason}" if isinstance(exc, EnrollError) else exc.reason) from None
    if not args.quiet:
        print(f"enrolled {args.name!r} in {store.root}: {meta['entries']} mouths from {meta['seconds']:.0f} s, "
              f"coverage {meta['coverage']:.0%} of the jaw's travel, {meta['disk_bytes'] / 1024:.0f} KB")
        if meta["coverage"] < 1.0:
            print("  the footage never opened the mouth that wide: wider openings are drawn")
    return 0


def cmd_avatars(args: argparse.Namespace) -> int:
    from engine.personal.store import StoreError

    store = _store(args)
    try:
        if args.action == "list":
            rows = store.list()
            if args.json:
                print(json.dumps(rows, indent=2))
            for row in [] if args.json else rows:
                print(f"{row['name']:<24} {row['seconds']:6.1f} s  coverage {row['coverage']:.0%}  "
                      f"{row['disk_bytes'] / 1024:6.0f} KB  {row['created']}")
            if not rows and not args.json:
                print(f"no personal avatars in {store.root}")
        else:
            if not args.name:
                raise PersonalCliError("avatars rm needs a NAME")
            store.remove(args.name)
            print(f"removed {args.name!r}")
    except StoreError as exc:
        raise PersonalCliError(exc.reason) from None
    return 0


def add_personal_parsers(sub: argparse._SubParsersAction) -> None:
    enroll = sub.add_parser("enroll", help="make a personal avatar from a 10 s - 5 min video of one person talking")
    enroll.add_argument("--video", required=True, help="the clip: the person facing the camera, talking")
    enroll.add_argument("--name", required=True, help="the avatar's name (lowercase letters, digits, - and _)")
    enroll.add_argument("--store", default=None, help="the avatar store (default: AVATAR_STORE or the data folder)")
    enroll.add_argument("--quiet", action="store_true")
    enroll.set_defaults(func=cmd_enroll)
    avatars = sub.add_parser("avatars", help="list or remove personal avatars")
    avatars.add_argument("action", choices=["list", "rm"])
    avatars.add_argument("name", nargs="?", default=None)
    avatars.add_argument("--store", default=None, help="the avatar store (default: AVATAR_STORE or the data folder)")
    avatars.add_argument("--json", action="store_true", help="list as JSON")
    avatars.set_defaults(func=cmd_avatars)
