"""JSON out through orjson, for any value storage hands back: what the boundary refuses today
(``core/text_limits.py``) may already be stored, or stored by the gateway, which forwards the
numbers the provider accepts. jsonb keeps a number as ``numeric`` and gives ``1e20`` back as the
integer 100000000000000000000, past the 64 bits orjson writes; a value stored before nesting was
bounded may be deeper than orjson's 254 levels. One such value must not fail every read of it.

The fast path is orjson as it is; only a value it refuses pays a slower writer, a loop (no depth
limit) that writes an integer past 64 bits as the float it stands for (``1e20`` back as
``1e+20``, as it was sent), as text when no float holds it, and NaN or an infinity as ``null``
(as orjson does)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

# orjson's own range for integers: signed 64 bits below zero, unsigned above.
_LOWEST, _HIGHEST = -(2**63), 2**64 - 1

Default = Callable[[Any], Any] | None


class _Written:
    """Bytes already written, waiting on the writer's stack for their turn (a comma, a colon
    after a key, a closing bracket)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


def _wide_integer(value: int) -> bytes:
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    return orjson.dumps(as_float if math.isfinite(as_float) else str(value))


def _key(key: Any) -> bytes:
    return orjson.dumps(key if isinstance(key, str) else str(key))


def _slow_dumps(data: Any, default: Default, option: int) -> bytes:
    out: list[bytes] = []
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, _Written):
            out.append(item.data)
        elif isinstance(item, dict):
            out.append(b"{")
            stack.append(_Written(b"}"))
            members = list(item.items())
            if option & orjson.OPT_SORT_KEYS:  # a cache key must not depend on the path taken
                members.sort(key=lambda pair: str(pair[0]))
            for index in range(len(members) - 1, -1, -1):
                key, member = members[index]
                stack.append(member)
                stack.append(_Written((b"," if index else b"") + _key(key) + b":"))
        elif isinstance(item, list | tuple):
            out.append(b"[")
            stack.append(_Written(b"]"))
            for index in range(len(item) - 1, -1, -1):
                stack.append(item[index])
                if index:
                    stack.append(_Written(b","))
        elif type(item) is int and not _LOWEST <= item <= _HIGHEST:
            out.append(_wide_integer(item))
        else:
            try:
                out.append(orjson.dumps(item, option=option))
            except TypeError:
                if default is None:
                    raise
                stack.append(default(item))  # converted, then written like any value
    return b"".join(out)


def dumps(data: Any, *, default: Default = None, option: int = 0) -> bytes:
    """``orjson.dumps(data, default=default, option=option)``, or, for a value orjson refuses
    (an integer past 64 bits, nesting past 254 levels), the same JSON by the slower writer."""
    try:
        return orjson.dumps(data, default=default, option=option)
    except TypeError:  # orjson.JSONEncodeError is one
        return _slow_dumps(data, default, option)


__all__ = ["dumps"]
