"""The memory store implementations; ``get_store`` is the one every caller uses.

PostgreSQL always holds the memories (``memory.stores.postgres``); a route's memory source may
recall through an external index instead (``memory.stores.external``: Milvus or Qdrant), which
mirrors the memories' vectors (``memory.stores.sync``).
"""

from __future__ import annotations

from memory.store import MemoryStore
from memory.stores.engines import IndexRef
from memory.stores.postgres import PostgresMemoryStore

_STORE = PostgresMemoryStore()


def get_store(index: IndexRef | None = None) -> MemoryStore:
    """The store a memory source recalls through: PostgreSQL, or the external ``index``."""
    if index is None:
        return _STORE
    from memory.stores.external import ExternalMemoryStore

    return ExternalMemoryStore(index)
