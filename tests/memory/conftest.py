"""Each test of memory starts in the public schema (the reason: ``tests/sources/conftest.py``;
the extractor's deployment name is looked up the same way).

``store`` and ``store_config`` run a test on every memory store: PostgreSQL, Milvus (a Milvus Lite
file) and Qdrant (its local mode). The Lite files and local directories live under one temporary
root for the whole session, so each tenant's Milvus Lite server starts once (a few seconds), not
once per test; a test's collection is made anew by its first recall (the test's ``ExternalIndex``
row is rolled back with the test, so the next finds none and fills the collection again).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.source import MemoryStoreConfig
from memory.store import MemoryStore
from memory.stores import get_store
from memory.stores.engines import IndexRef
from tests.sources.conftest import public_schema_first  # noqa: F401  (autouse)

STORE_CONFIGS: dict[str, dict[str, Any]] = {
    "postgres": {},
    "milvus": {"backend": "milvus", "uri": "memories.db"},
    "qdrant": {"backend": "qdrant", "url": "memories"},
}


@pytest.fixture(scope="session")
def memory_vector_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("memory-vectors")
    yield root
    from sources.rag import milvus, qdrant

    milvus.forget_connections()
    qdrant.forget_connections()


def use_vector_root(settings: Any, root: Path) -> None:
    from memory.stores import milvus, qdrant

    settings.VECTOR_LOCAL_ROOT = root
    milvus.forget()  # another test module may have closed the clients (forget_connections)
    qdrant.forget()


@pytest.fixture(params=list(STORE_CONFIGS))
def store_config(
    request: pytest.FixtureRequest, settings: Any, memory_vector_root: Path
) -> dict[str, Any]:
    """A memory source's ``store`` block for each store (PostgreSQL's is empty: the default)."""
    use_vector_root(settings, memory_vector_root)
    return dict(STORE_CONFIGS[request.param])


@pytest.fixture(params=["milvus", "qdrant"])
def external(request: pytest.FixtureRequest, settings: Any, memory_vector_root: Path) -> IndexRef:
    """Each external index, as a route's ``store`` block names it."""
    use_vector_root(settings, memory_vector_root)
    ref = MemoryStoreConfig(**STORE_CONFIGS[request.param]).index
    assert ref is not None
    return ref


@pytest.fixture
def store(store_config: dict[str, Any]) -> MemoryStore:
    return get_store(MemoryStoreConfig(**store_config).index)
