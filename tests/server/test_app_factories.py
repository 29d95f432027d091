"""The app factories only put routers together: each small, one module per concern; and building an
app changes nothing process-wide (that is :func:`server.api.process.prepare_process`'s, once)."""

from __future__ import annotations

import ast
from pathlib import Path

import aiortc.rtcicetransport
import pytest
from server_helpers import make_settings

from server.api.app import create_app
from server.api.process import prepare_process
from server.media import ice_network

ROOT = Path(__file__).resolve().parents[2]
FACTORY_LINES = 40  # create_app, create_front: settings in, routers and middleware put together
ROUTER_LINES = 80  # each router's create_router
MODULE_LINES = 200  # each router module, its helpers included
ROUTERS = ["server/api/ops.py", "server/api/catalog.py", "server/api/sessions.py", "server/api/control_route.py",
           "server/api/whip.py", "server/api/avatars.py", "server/front/ops.py", "server/front/sessions.py",
           "server/front/avatars.py"]


def function_lines(path: str, name: str) -> int:
    tree = ast.parse((ROOT / path).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return node.end_lineno - node.lineno + 1


@pytest.mark.parametrize("path, name", [("server/api/app.py", "create_app"), ("server/front/app.py", "create_front")])
def test_the_app_factories_are_short(path: str, name: str) -> None:
    assert function_lines(path, name) <= FACTORY_LINES


@pytest.mark.parametrize("path", ROUTERS)
def test_each_router_is_small(path: str) -> None:
    assert function_lines(path, "create_router") <= ROUTER_LINES
    assert len((ROOT / path).read_text().splitlines()) <= MODULE_LINES


def test_building_an_app_leaves_the_process_alone_and_preparing_it_is_idempotent() -> None:
    placed = make_settings(ice_ports="40000-40009", public_address="203.0.113.7")
    prepare_process(make_settings().network)
    assert aiortc.rtcicetransport.Connection is ice_network.AIOICE_CONNECTION
    create_app(placed)
    assert aiortc.rtcicetransport.Connection is ice_network.AIOICE_CONNECTION
    try:
        for _ in range(2):
            prepare_process(placed.network)
            connection = aiortc.rtcicetransport.Connection
            assert connection.network == ice_network.IceNetwork((40000, 40009), "203.0.113.7")
    finally:
        prepare_process(make_settings().network)
    assert aiortc.rtcicetransport.Connection is ice_network.AIOICE_CONNECTION
