"""A resource reads back the way it is written (docs/api.md): a ``GET`` body is what ``POST`` and
``PUT`` take plus read-only fields (timestamps, counts, what the platform derives), which a write
ignores, so a body read from one tenant posts to another, or back to the same resource, as it is.

Each resource names its read-only fields next to its representation; a field not named there is
still refused as unknown, so a misspelt field keeps its error."""

from __future__ import annotations

from typing import Any


def without_read_only(data: Any, read_only: frozenset[str]) -> Any:
    """``data`` less the members ``read_only`` names; anything but an object as it is (the
    body's own validation reports it)."""
    if not isinstance(data, dict):
        return data
    return {key: value for key, value in data.items() if key not in read_only}
