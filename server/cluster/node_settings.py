"""What an avatar node runs with: the gateway's settings, then the node's own ``AVATAR_*`` environment.

The gateway hands its nodes the settings it was given explicitly (flags and its environment), all but
where it listens. A node's environment wins over them, so one machine can announce its own public
address (``AVATAR_PUBLIC_ADDRESS``), ICE/TURN servers, UDP ports or device. A node listens on its Ray
address at a free port unless its environment names a host or port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.config import Settings

GATEWAY_ONLY = frozenset({"host", "port"})


def passed_to_nodes(settings: Settings) -> dict[str, Any]:
    """The settings the gateway was given explicitly, as JSON values (they travel to every node)."""
    return {name: value for name, value in settings.given().items() if name not in GATEWAY_ONLY}


def node_settings(passed: Mapping[str, Any], environ: Mapping[str, str], node_ip: str) -> Settings:
    """Defaults, the gateway's ``passed`` values, then this node's environment; ``ValueError`` if invalid."""
    local = Settings.from_env(environ).given()
    return Settings.model_validate({"host": node_ip, "port": 0, **passed, **local})
