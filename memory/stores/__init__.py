"""The memory store implementations; ``get_store`` is the one every caller uses."""

from __future__ import annotations

from memory.store import MemoryStore
from memory.stores.postgres import PostgresMemoryStore

_STORE = PostgresMemoryStore()


def get_store() -> MemoryStore:
    """The deployment's memory store (PostgreSQL: memories live in each tenant's schema)."""
    return _STORE
