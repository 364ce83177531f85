"""Counting a request's trips from the event loop to a thread and back (``sync_to_async``)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import SyncToAsync


def count_trips_to_a_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of each function sent to a thread and waited for, in order."""
    trips: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return trips
