"""A control message's JSON parsed within bounds: nesting, and the length of every number.

Python's parser turns any run of digits into an integer (one of 5,000 digits raises a bare
``ValueError`` that no ``JSONDecodeError`` handler catches), ``1e999999`` into infinity and
accepts ``NaN``; no field of the protocol needs any of them. Every number literal is checked as
text before it is converted: at most ``MAX_NUMBER_CHARS`` characters, an exponent within
``MAX_EXPONENT``, a finite value; ``NaN`` and ``Infinity`` are refused. Each refusal is a
``ControlError`` (``bad_json``, ``too_deep``, ``bad_message``): an ``error`` event, the socket open.
"""

from __future__ import annotations

import json
import math

from server.base.errors import ControlError

MAX_NUMBER_CHARS = 32  # sign, digits, point and exponent: far beyond any rate, id or count sent
MAX_EXPONENT = 308  # a float's decimal exponent; past it a double is infinite (or rounds to zero)


def _bad_number(literal: str, why: str) -> ControlError:
    shown = literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} characters)"
    return ControlError("bad_message", f"number {shown}: {why}")


def _integer(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _bad_number(literal, f"over {MAX_NUMBER_CHARS} characters")
    return int(literal)


def _float(literal: str) -> float:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _bad_number(literal, f"over {MAX_NUMBER_CHARS} characters")
    mantissa, _, exponent = literal.lower().partition("e")
    if exponent and abs(int(exponent)) > MAX_EXPONENT:
        raise _bad_number(literal, f"exponent beyond ±{MAX_EXPONENT}")
    value = float(literal)
    if not math.isfinite(value):
        raise _bad_number(literal, "not a finite number")
    return value


def _constant(name: str) -> float:
    raise _bad_number(name, "not a JSON number")


def json_depth(value: object) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    depth, level = 0, [(value, 0)]
    while level:
        item, d = level.pop()
        if isinstance(item, dict | list):
            depth = max(depth, d + 1)
            level.extend((child, d + 1) for child in (item.values() if isinstance(item, dict) else item))
    return depth


def parse(text: str, max_depth: int) -> object:
    """``text`` parsed, its numbers and nesting within bounds; ``ControlError`` if not."""
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise ControlError("bad_json", f"not JSON: {exc.msg} at position {exc.pos}") from exc
    except RecursionError:  # deeper than the parser goes
        raise ControlError("too_deep", f"JSON nested over {max_depth} levels") from None
    if json_depth(value) > max_depth:
        raise ControlError("too_deep", f"JSON nested over {max_depth} levels")
    return value
