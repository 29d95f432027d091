"""``avatar serve``: flags (each with an ``AVATAR_*`` env-var equivalent) -> settings -> uvicorn.

Hooked into the ``avatar`` console script by ``engine.cli`` via :func:`add_serve_parser`;
``python -m server.cli`` runs the same thing standalone.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import uvicorn
from pydantic import ValidationError

from engine.presets import Preset
from server.api.process import prepare_process
from server.api.redact import install_redaction
from server.api.uvicorn_config import server_config
from server.config import ENV_PREFIX, GROUP_OF, SETTING_GROUPS, Settings

FLAGS: list[tuple[str, str, dict[str, Any]]] = [
    ("--host", "host", {"help": "bind address (others than loopback need --auth-token)"}),
    ("--port", "port", {"type": int, "help": "port to listen on"}),
    ("--config", "config", {"help": "engine config name"}),
    ("--device", "device", {"help": "cpu | cuda | cuda:N"}),
    ("--threads", "engine_threads", {"type": int, "help": "torch threads for the engine (default: all cores but one)"}),
    ("--guidance", "guidance", {"type": float, "help": "audio guidance, 1 = off (default: the config's)"}),
    ("--engine", "engine", {"choices": ["subprocess", "inprocess"],
                            "help": "engine workers in their own processes (default) or a server thread"}),
    ("--web-processes", "web_processes", {"type": int, "help": "web processes behind one front, sharing the "
                                                              "engine workers (default one per four cores)"}),
    ("--engine-workers", "engine_workers", {"type": int, "help": "engine worker processes (default one per device)"}),
    ("--sequence-parallel", "sequence_parallel", {"type": int, "help": "each worker's ranks splitting chunks"}),
    ("--pipeline-parallel", "pipeline_parallel", {"type": int,
                                                   "help": "each worker's ranks holding consecutive DiT blocks"}),
    ("--shard", "shard", {"type": int, "help": "each worker's ranks sharding the DiT's weights (FSDP2)"}),
    ("--offload", "offload", {"action": "store_const", "const": True,
                              "help": "modules in pinned CPU memory, copied in block by block"}),
    ("--max-sessions", "max_sessions", {"type": int,
                                        "help": "cap on sessions (default none: the engine's measured capacity)"}),
    (
        "--ice-server",
        "ice_servers",
        {
            "action": "append",
            "metavar": "URL",
            "help": "stun:host:port or turn:user:pass@host:port; repeatable",
        },
    ),
    ("--auth-token", "auth_token", {"help": "bearer token required to create sessions"}),
    ("--record-dir", "record_dir", {"help": "folder for sessions created with record=true"}),
    ("--avatar-store", "avatar_store", {"help": "folder of the personal avatars (default: AVATAR_STORE, else "
                                                "~/.local/share/avatar/avatars)"}),
    ("--mode", "default_mode", {"choices": ["mirror", "agent"], "help": "default session mode"}),
    ("--quality", "default_quality", {"choices": list(Preset), "help": "default preset"}),
    ("--avatar", "default_avatar", {"help": "default avatar identity"}),
    ("--voice", "voice", {"help": "voice for speak (piper: joe; espeak-ng: en-us)"}),
    ("--tts", "tts", {"choices": ["piper", "espeak"], "help": "built-in TTS backend for speak"}),
    ("--piper-model", "piper_model", {"help": "a Piper .onnx voice to use instead of the bundled joe voice"}),
]


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve",
        help="run the real-time WebRTC server and demo page",
        description=f"Every flag has an environment variable {ENV_PREFIX}<FIELD> (e.g. {ENV_PREFIX}PORT, "
        f"{ENV_PREFIX}MAX_SESSIONS, {ENV_PREFIX}ICE_SERVERS space-separated); flags win.",
    )
    for flag, field, kwargs in FLAGS:
        env = f"[env {ENV_PREFIX}{field.upper()}]"
        parser.add_argument(flag, dest=field, default=None,
                            **{**kwargs, "help": f"{kwargs['help']}{default_of(field)} {env}"})
    parser.add_argument("--ray", metavar="ADDRESS", default=os.environ.get(f"{ENV_PREFIX}RAY") or None,
                        help="run as the gateway of a Ray cluster (HOST:PORT or auto): sessions go to the avatar "
                        f"nodes, the Ray nodes offering the `avatar` resource [env {ENV_PREFIX}RAY]")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=serve)
    return parser


def default_of(field: str) -> str:
    """`` (default X)`` from the setting's own default, where it has a fixed one."""
    info = SETTING_GROUPS[GROUP_OF[field]].model_fields[field]
    if info.default_factory is not None or info.default is None or info.default is False:
        return ""
    return f" (default {info.default})"


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings.from_env(**{field: getattr(args, field, None) for _, field, _ in FLAGS})


def invalid_settings(exc: ValidationError) -> str:
    """A rejected setting named as the operator gave it: its env var (and flag), the value, why."""
    flags = {field: flag for flag, field, _ in FLAGS}
    lines = []
    for error in exc.errors():
        field = str(error["loc"][1]) if len(error["loc"]) > 1 else str(error["loc"][0])
        name = ENV_PREFIX + field.upper() + (f" ({flags[field]})" if field in flags else "")
        lines.append(f"{name}={error.get('input')!r}: {error['msg']}")
    return "bad settings: " + "; ".join(lines)


def serve(args: argparse.Namespace) -> int:
    install_redaction()  # before any log line: no token in them, whichever app runs
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_from_args(args)
        settings.check_bind()
        engine_plan_check(settings)
    except ValidationError as exc:
        print(f"avatar serve: {invalid_settings(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"avatar serve: {exc}", file=sys.stderr)
        return 2
    prepare_process(settings.network)
    if settings.network.exposed:
        print(f"avatar serve: bound to {settings.network.host}, reachable beyond this machine: creating a session "
              f"needs the bearer token ({ENV_PREFIX}AUTH_TOKEN)", file=sys.stderr)
    app = gateway_app(settings, args.ray) if getattr(args, "ray", None) else node_app(settings, args.log_level)
    if app is None:
        return 2
    print(f"avatar serve: open http://{settings.network.host}:{settings.network.port}/", file=sys.stderr)
    uvicorn.Server(server_config(app, settings, args.log_level)).run()
    return 0


def gateway_app(settings: Settings, address: str) -> Any:
    """The gateway of the Ray cluster at ``address``; None (after one line) if it cannot be joined."""
    from server.cluster.gateway import create_gateway
    from server.cluster.join import ClusterUnreachable, join

    try:
        join(address)
    except ClusterUnreachable as exc:
        print(f"avatar serve: {exc}", file=sys.stderr)
        return None
    return create_gateway(settings)


def engine_plan_check(settings: Settings) -> None:
    """``ValueError`` (one line) when the parallel flags name a plan no engine can run here."""
    from server.api.engine_setup import worker_devices, worker_options

    worker_devices(worker_options(settings))


def node_app(settings: Settings, log_level: str = "info") -> Any:
    """The one-machine server: one web process, or ``web_processes`` of them behind a front; None
    (after one line) if it cannot run."""
    from server.api.serving import CannotServe, serving_app

    try:
        if settings.node.web_processes > 1:
            from server.node.front import create_node_front

            return create_node_front(settings, log_level)
        return serving_app(settings)
    except CannotServe as exc:
        print(f"avatar serve: {exc}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="avatar")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
