"""The gateway joins a Ray cluster as a driver; a cluster it cannot reach is one clear error.

``ray.init`` retries an address that does not answer for minutes, so the address is first tried
with a plain TCP connection.
"""

from __future__ import annotations

import logging
import socket

import ray

from server.cluster.node import NAMESPACE

CONNECT_TIMEOUT_S = 5.0


class ClusterUnreachable(Exception):
    """The ``--ray`` address names no Ray cluster this process can join."""


def join(address: str) -> None:
    """Connect this process to the cluster at ``address`` (``host:port`` as ``ray start --head``
    prints it, or ``auto``: the cluster started on this machine)."""
    if address != "auto":
        host, port = _host_port(address)
        try:
            socket.create_connection((host, port), CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise ClusterUnreachable(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: {reason}") from None


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterUnreachable(f"bad Ray address {address!r}: expected HOST:PORT (as `ray start --head` prints) "
                                 "or auto")
    return host.strip("[]"), int(port)
