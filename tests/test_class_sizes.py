"""No object in the server holds more than 15 attributes, none in the engine more than 20: one with
more is several objects.

Counted: the names a class assigns on ``self`` and the fields it declares. Frozen dataclasses are
values (a snapshot's counters, a configuration), not objects with state, so they are not held to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 15
ENGINE_LIMIT = 20  # the engine's model and worker classes hold more of their own than the server's


def _frozen_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "dataclass":
            if any(k.arg == "frozen" and getattr(k.value, "value", False) is True for k in deco.keywords):
                return True
    return False


def attributes(cls: ast.ClassDef) -> set[str]:
    """The attribute names a class declares or assigns on ``self`` (nested classes' excluded)."""
    names = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    stack: list[ast.AST] = [n for n in cls.body if not isinstance(n, ast.ClassDef)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.ClassDef))
    return names


def classes_over(limit: int, package: Path) -> dict[str, int]:
    over = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and not _frozen_dataclass(node):
                count = len(attributes(node))
                if count > limit:
                    over[f"{path.relative_to(ROOT)}:{node.name}"] = count
    return over


def test_the_count_sees_assignments_fields_and_values() -> None:
    source = ast.parse(
        "from dataclasses import dataclass\n"
        "class Held:\n"
        "    kind: str\n"
        "    def __init__(self):\n"
        "        self.a = 1\n"
        "        if True:\n"
        "            self.b, self.c = 2, 3\n"
        "    def later(self):\n"
        "        self.a += 1\n"
        "        self.d = self.a\n"
        "@dataclass(frozen=True)\n"
        "class Value:\n"
        "    x: int\n"
    )
    held, value = (n for n in source.body if isinstance(n, ast.ClassDef))
    assert attributes(held) == {"kind", "a", "b", "c", "d"}
    assert not _frozen_dataclass(held) and _frozen_dataclass(value)


def test_no_server_class_holds_more_than_fifteen_attributes() -> None:
    assert classes_over(LIMIT, ROOT / "server") == {}


def test_no_engine_class_holds_more_than_twenty_attributes() -> None:
    assert classes_over(ENGINE_LIMIT, ROOT / "engine") == {}
