"""A small JSON path for mapping an answer into items.                                     [pure]

``$`` is the whole answer; then any number of steps: ``.key`` (a name of letters, digits, ``_``
and ``-``), ``['key']`` or ``["key"]`` (any key), ``[n]`` (a list index, negative from the end),
``[*]`` or ``.*`` (every element of a list, every value of an object). ``$.accounts[*]`` is one
match per account. A step that finds nothing drops that branch (no match is not an error).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)")
_INDEX = re.compile(r"\[(-?\d{1,9})\]")
_WILDCARD = re.compile(r"\[\*\]|\.\*")
_QUOTED = re.compile(r"""\[(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\]""")
MAX_STEPS = 32


class PathError(ValueError):
    """Not a path this selector reads."""


@dataclass(frozen=True)
class Step:
    kind: str  # "key", "index" or "all"
    key: str = ""
    index: int = 0

    def shown(self) -> str:
        if self.kind == "all":
            return "[*]"
        if self.kind == "index":
            return f"[{self.index}]"
        if _NAME.fullmatch(f".{self.key}"):
            return f".{self.key}"
        return "[" + json.dumps(self.key, ensure_ascii=False) + "]"


def parse(path: str) -> tuple[Step, ...]:
    if not path.startswith("$"):
        raise PathError("a path starts with $ (the whole answer)")
    steps: list[Step] = []
    at = 1
    while at < len(path):
        if len(steps) >= MAX_STEPS:
            raise PathError(f"at most {MAX_STEPS} steps")
        if match := _WILDCARD.match(path, at):
            steps.append(Step("all"))
        elif match := _NAME.match(path, at):
            steps.append(Step("key", key=match.group(1)))
        elif match := _INDEX.match(path, at):
            steps.append(Step("index", index=int(match.group(1))))
        elif match := _QUOTED.match(path, at):
            quoted = match.group(1) if match.group(1) is not None else match.group(2)
            steps.append(Step("key", key=re.sub(r"\\(.)", r"\1", quoted)))
        else:
            raise PathError(f"cannot read {path[at:]!r}: steps are .key, ['key'], [n], [*] and .*")
        at = match.end()
    return tuple(steps)


def select(value: Any, steps: tuple[Step, ...]) -> list[tuple[str, Any]]:
    """Every match, in document order, with its concrete path (``$.accounts[0]``)."""
    found: list[tuple[str, Any]] = [("$", value)]
    for step in steps:
        following: list[tuple[str, Any]] = []
        for where, current in found:
            following.extend(_step(where, current, step))
        found = following
    return found


def _step(where: str, current: Any, step: Step) -> list[tuple[str, Any]]:
    if step.kind == "key":
        if isinstance(current, dict) and step.key in current:
            return [(where + step.shown(), current[step.key])]
        return []
    if step.kind == "index":
        if isinstance(current, list) and -len(current) <= step.index < len(current):
            return [(where + step.shown(), current[step.index])]
        return []
    if isinstance(current, list):
        return [(f"{where}[{n}]", item) for n, item in enumerate(current)]
    if isinstance(current, dict):
        return [(where + Step("key", key=str(k)).shown(), v) for k, v in current.items()]
    return []
