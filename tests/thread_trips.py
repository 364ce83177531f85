"""Counting a request's trips between the event loop and a thread: from the loop to a thread and
back (``sync_to_async``), and from a thread to the loop and back (``async_to_sync``)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync


def count_trips_to_a_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of each function sent to a thread and waited for, in order."""
    trips: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return trips


def count_calls_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of each coroutine function a thread ran on the event loop and waited
    for (``async_to_sync``), in order."""
    calls: list[str] = []
    original = AsyncToSync.__call__

    def counted(self: AsyncToSync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(self.awaitable, "__qualname__", repr(self.awaitable)))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AsyncToSync, "__call__", counted)
    return calls
