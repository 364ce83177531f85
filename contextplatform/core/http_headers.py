"""The shape every configured outbound header must have (a deployment's, an MCP server's): checked
where it is written. Each resource says which names it refuses and why, and how long a value may
be; the rest (a valid name, one value per name, no line breaks) is the same everywhere."""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_HEADER_NAME_CHARS = 100
# RFC 9110 token characters: what a header name may hold.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def header_problem(
    name: str,
    value: str,
    *,
    refused: Mapping[str, str],
    max_value_chars: int,
    empty_allowed: bool = True,
) -> str | None:
    """What is wrong with one header, or None. ``refused``: lower-case names the resource sets or
    keeps elsewhere, each with the end of the sentence that says why."""
    if not HEADER_NAME.match(name) or len(name) > MAX_HEADER_NAME_CHARS:
        return f"header name {name[:MAX_HEADER_NAME_CHARS]!r} is not a valid HTTP header name"
    reason = refused.get(name.lower())
    if reason is not None:
        return f"header {name!r} {reason}"
    if not value and not empty_allowed:
        return f"header {name!r}: empty value (leave the header out instead)"
    if len(value) > max_value_chars:
        return f"header {name!r}: value longer than {max_value_chars} characters"
    if any(c in value for c in "\r\n\0"):
        return f"header {name!r}: value must not contain line breaks"
    return None


def checked_headers(
    value: dict[str, str] | None,
    *,
    refused: Mapping[str, str],
    max_value_chars: int,
    empty_allowed: bool = True,
) -> dict[str, str] | None:
    """``value`` when every header is well formed and no name is given twice (names are
    case-insensitive); else ValueError naming the first problem."""
    lowered: set[str] = set()
    for name, text in (value or {}).items():
        problem = header_problem(
            name,
            text,
            refused=refused,
            max_value_chars=max_value_chars,
            empty_allowed=empty_allowed,
        )
        if problem:
            raise ValueError(problem)
        if name.lower() in lowered:
            raise ValueError(f"header {name!r} is given twice (names are case-insensitive)")
        lowered.add(name.lower())
    return value
