"""Which arm of a route's traffic split a request runs: a stable hash of the route and the
caller (the user, else the session, else the request itself) placed on [0, 1), the variants
taking their weights from the bottom in the order written and the route's own context ("main")
what they leave. sha256, so every process and every restart places a caller alike."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

MAIN = "main"
_SCALE = float(2**64)


def hash_point(route: str, key: str) -> float:
    """Where ``key`` falls on [0, 1) for ``route`` (another route places the same caller anew, so
    one user is not in every route's variant at once)."""
    digest = hashlib.sha256(f"{route}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def arm_for(route: str, key: str, variants: Sequence[tuple[str, float]]) -> str:
    """The arm (a variant's name, or ``main``) of ``key`` among ``variants`` (name, weight)."""
    point = hash_point(route, key)
    upper = 0.0
    for name, weight in variants:
        upper += weight
        if point < upper:
            return name
    return MAIN


def caller_key(user: str | None, session: str | None, request_id: str) -> str:
    """What a request is split by: its user, else its session, else the request itself (each
    kind prefixed, so a user and a session of the same name are placed apart)."""
    if user:
        return f"user:{user}"
    if session:
        return f"session:{session}"
    return f"request:{request_id}"
