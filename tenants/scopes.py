"""API key scopes (the contract of docs/api.md)."""

from __future__ import annotations

ALL_SCOPES: tuple[str, ...] = (
    "resolve",
    "ingest",
    "routes.read",
    "routes.write",
    "deployments.read",
    "deployments.write",
    "memory.read",
    "memory.write",
    "replay.read",
    "compression.read",
    "compression.preview",
    "compression.manage",
    "keys.manage",
    "evals.run",
)


class UnknownScopeError(ValueError):
    pass


def parse_scopes(text: str | list[str]) -> list[str]:
    """Parse ``"resolve,memory.read"`` (or a list); refuse unknown names; keep the canonical order."""
    names = [part.strip() for part in (text.split(",") if isinstance(text, str) else text)]
    names = [name for name in names if name]
    unknown = sorted(set(names) - set(ALL_SCOPES))
    if unknown:
        raise UnknownScopeError(
            f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(ALL_SCOPES)}"
        )
    if not names:
        raise UnknownScopeError("at least one scope is required")
    return [scope for scope in ALL_SCOPES if scope in names]
