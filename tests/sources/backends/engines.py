"""The two vector engines the ``milvus`` and ``qdrant`` backends search, as the tests fill and
name them: collections filled with the platform's embedder (Milvus Lite in this process, Qdrant's
embedded local mode), each engine's route over them, and ``Engine`` for the tests both engines
must pass alike (``test_vector_engines.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sources.embedding import get_embedder
from tests.sources.backends.conftest import DOCUMENTS, RECALL_ALL, backend_route, embedded, kept

# --- Milvus ---------------------------------------------------------------------------------------


def rows(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": doc["id"], "vector": vector, "content": doc["text"], "metadata": doc["metadata"]}
        for doc, vector in zip(documents, embedded(documents), strict=True)
    ]


def fill_here(path: Path, collection: str, documents: list[dict[str, Any]]) -> None:
    """Fill a Milvus Lite collection from this process (another client of the same file)."""
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=str(path))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=get_embedder().dimensions)
    schema.add_field("content", DataType.VARCHAR, max_length=4000)
    schema.add_field("metadata", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="HNSW", metric_type="COSINE")
    client.create_collection(collection, schema=schema, index_params=index)
    client.insert(collection, rows(documents))
    client.close()


def milvus_route(name: str = "r", **config: Any) -> dict[str, Any]:
    source = config.pop("source", {})
    return backend_route(
        name,
        "milvus",
        {"collection": "docs", "uri": "kb.db", "metadata_field": "metadata", **config},
        **{"match": RECALL_ALL, **source},
    )


# --- Qdrant ---------------------------------------------------------------------------------------

# Point ids are integers or UUIDs in Qdrant: the document's id lives in the payload too.
IDS = {doc["id"]: str(uuid.uuid5(uuid.NAMESPACE_URL, doc["id"])) for doc in DOCUMENTS}
NAMES = {point: name for name, point in IDS.items()}


def fill(
    path: Path,
    collection: str,
    documents: list[dict[str, Any]],
    *,
    size: int | None = None,
    metadata: bool = True,
) -> None:
    """Fill a local-mode collection with another client, closed afterwards (the local mode lets
    one client at a time hold a directory)."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    dimensions = size or get_embedder().dimensions
    client.create_collection(
        collection,
        vectors_config=models.VectorParams(size=dimensions, distance=models.Distance.COSINE),
    )
    vectors = embedded(documents) if size is None else [[1.0] * size for _ in documents]
    client.upsert(
        collection,
        points=[
            models.PointStruct(
                id=IDS[doc["id"]],
                vector=vector,
                payload={
                    "content": doc["text"],
                    **({"metadata": doc["metadata"]} if metadata else doc["metadata"]),
                },
            )
            for doc, vector in zip(documents, vectors, strict=True)
        ],
    )
    client.close()


def qdrant_route(name: str = "r", **config: Any) -> dict[str, Any]:
    source = config.pop("source", {})
    return backend_route(
        name,
        "qdrant",
        {"collection": "docs", "url": "kb", "metadata_field": "metadata", **config},
        **{"match": RECALL_ALL, **source},
    )


def names(source: dict[str, Any]) -> list[str]:
    return [NAMES[point] for point in kept(source)]


# --- either ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """One engine as the shared tests use it."""

    name: str  # the backend's name
    local: str  # the tenant's local file or directory ``route`` names by default
    fill: Callable[[Path, str, list[dict[str, Any]]], None]
    route: Callable[..., dict[str, Any]]
    document: Callable[[str], str]  # a hit's document_id -> the DOCUMENTS id it stands for
    address_field: str  # the config's server field
    secret_field: str  # the config's secret field
    platform_setting: str  # the platform's server of this engine
    server: str  # a server URL of the engine's (on loopback, not on any allow-list)
    secret: str  # a secret of the engine's form

    def ids(self, source: dict[str, Any]) -> list[str]:
        """The DOCUMENTS ids of the source's kept candidates, in order."""
        return [self.document(point) for point in kept(source)]


ENGINES = {
    "milvus": Engine(
        name="milvus",
        local="kb.db",
        fill=fill_here,
        route=milvus_route,
        document=lambda point: point,
        address_field="uri",
        secret_field="token",
        platform_setting="VECTOR_MILVUS_URI",
        server="http://127.0.0.1:19530",
        secret="root:Milvus",
    ),
    "qdrant": Engine(
        name="qdrant",
        local="kb",
        fill=fill,
        route=qdrant_route,
        document=NAMES.__getitem__,
        address_field="url",
        secret_field="api_key",
        platform_setting="VECTOR_QDRANT_URL",
        server="http://127.0.0.1:6333",
        secret="qdrant-secret-key",
    ),
}
