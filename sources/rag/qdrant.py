"""The ``qdrant`` backend: a Qdrant collection searched with the platform embedder's query vector
(qdrant-client's ``QdrantClient``).

``url`` is a Qdrant server, or the name of a directory for the client's embedded local mode
(Qdrant in this process, no server: for development and tests). The local mode locks its
directory to one client, so one client per connection per process (``ClientPool``), and calls to
a local client are serialised (it keeps its state in SQLite and numpy arrays, for one caller at a
time).

Scores: the collection's distance, turned into cosine similarity (``Cosine`` and ``Dot`` over unit
vectors are cosines already; ``Euclid``'s distance d over unit vectors gives 1 - d²/2). The
source's ``filter`` becomes Qdrant ``must`` conditions on payload keys (under ``metadata_field``
when set): a match per value, a list needing each of its members.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sources.rag.backends import BackendError
from sources.rag.vector_backends import (
    ClientPool,
    EngineBackend,
    OpenedCollections,
    Search,
    Target,
    check_dimensions,
    check_remote,
    connection_key,
    engine_hit,
    filter_items,
    scalar,
)
from sources.rag.vector_configs import QdrantConfig
from sources.recall import RecallHit

CLIENTS = ClientPool()
_LOCAL_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()
DISTANCE_TO_COSINE = {
    "Cosine": lambda score: score,
    "Dot": lambda score: score,
    "Euclid": lambda score: 1.0 - score * score / 2.0,
}


@dataclass(frozen=True)
class Opened:
    vector_name: str | None  # None: the collection's single unnamed vector
    distance: str


_OPENED: OpenedCollections[Opened] = OpenedCollections()


def open_client(target: Target, seconds: float) -> Any:
    from qdrant_client import QdrantClient

    if target.local:
        try:
            # The pool's threads take turns (serialised below), so SQLite's same-thread check
            # has nothing to protect.
            return QdrantClient(path=target.address, force_disable_check_same_thread=True)
        except RuntimeError as error:
            if "already accessed" in str(error):
                raise BackendError(
                    "qdrant: the local-mode directory is open in another process; the local "
                    "mode serves one platform process (development), a Qdrant server any number"
                ) from error
            raise
    return QdrantClient(
        url=target.address,
        api_key=target.secret,
        timeout=max(1, round(seconds)),
        check_compatibility=False,
    )


def local_lock(target: Target) -> threading.Lock | None:
    if not target.local:
        return None
    with _LOCKS_LOCK:
        return _LOCAL_LOCKS.setdefault(target.address, threading.Lock())


def payload_key(path: tuple[str, ...], metadata_field: str | None) -> str:
    for key in path:
        if not key or any(c in key for c in ".[]"):
            raise BackendError(f"filter key {key!r}: Qdrant payload keys cannot hold . [ ]")
    return ".".join((metadata_field, *path) if metadata_field else path)


def conditions(wanted: dict[str, Any] | None, metadata_field: str | None) -> Any:
    from qdrant_client import models

    must: list[Any] = []
    for path, value in filter_items(wanted):
        key = payload_key(path, metadata_field)
        for item in value if isinstance(value, list) else [value]:
            exact = scalar(item, ".".join(path))
            if isinstance(exact, float):
                must.append(
                    models.FieldCondition(key=key, range=models.Range(gte=exact, lte=exact))
                )
            else:
                must.append(models.FieldCondition(key=key, match=models.MatchValue(value=exact)))
    return models.Filter(must=must) if must else None


class QdrantBackend(EngineBackend):
    name = "qdrant"
    engine = "qdrant"
    platform_setting = "VECTOR_QDRANT_URL"
    platform_secret_setting = "VECTOR_QDRANT_API_KEY"
    config: QdrantConfig

    def __init__(self, config: QdrantConfig):
        super().__init__(config, config.url, config.api_key)

    def search(self, search: Search, seconds: float) -> list[RecallHit]:
        target = self.target(search.schema)
        check_remote(target, search.allowlist)
        key = connection_key(target)
        client = CLIENTS.get(key, lambda: open_client(target, seconds))
        lock = local_lock(target)
        try:
            if lock is None:
                return self.search_with(client, key, target, search, seconds)
            with lock:
                return self.search_with(client, key, target, search, seconds)
        except Exception:
            _OPENED.pop((key, target.collection), None)  # read the collection again next time
            raise

    def search_with(
        self, client: Any, key: tuple[str, ...], target: Target, search: Search, seconds: float
    ) -> list[RecallHit]:
        opened = self.opened(client, key, target.collection)
        content, metadata = self.config.content_field, self.config.metadata_field
        answer = client.query_points(
            target.collection,
            query=search.vector,
            using=opened.vector_name,
            query_filter=conditions(search.wanted, metadata),
            limit=search.top_k,
            with_payload=True,
            timeout=max(1, round(seconds)),
        )
        to_cosine = DISTANCE_TO_COSINE[opened.distance]
        hits = []
        for point in answer.points:
            payload = point.payload or {}
            hit = engine_hit(
                search,
                collection=self.config.collection,
                document_id=str(point.id),
                cosine=float(to_cosine(float(point.score))),
                text=dig(payload, content),
                metadata=dig(payload, metadata) if metadata else None,
                title=payload.get("title"),
            )
            if hit is not None:
                hits.append(hit)
        return hits

    def opened(self, client: Any, key: tuple[str, ...], collection: str) -> Opened:
        known = _OPENED.get((key, collection))
        if known is not None:
            return known
        if not client.collection_exists(collection):
            raise BackendError(f"qdrant: no collection named {collection!r}")
        vectors = client.get_collection(collection).config.params.vectors
        name, params = self.vector_params(vectors)
        distance = getattr(params.distance, "value", str(params.distance))
        if distance not in DISTANCE_TO_COSINE:
            raise BackendError(
                f"qdrant: the collection's distance {distance} gives no cosine similarity "
                "(Cosine, Dot or Euclid)"
            )
        check_dimensions(self.engine, collection, int(params.size))
        opened = Opened(name, distance)
        _OPENED[(key, collection)] = opened
        return opened

    def vector_params(self, vectors: Any) -> tuple[str | None, Any]:
        if not isinstance(vectors, dict):
            if self.config.vector_name:
                raise BackendError("qdrant: the collection's vector has no name")
            return None, vectors
        wanted = self.config.vector_name
        if wanted:
            if wanted not in vectors:
                raise BackendError(f"qdrant: the collection has no vector named {wanted!r}")
            return wanted, vectors[wanted]
        if len(vectors) != 1:
            names = ", ".join(sorted(vectors)) or "none"
            raise BackendError(f"qdrant: name the vector (vector_name); found {names}")
        return next(iter(vectors.items()))


def dig(payload: dict[str, Any], key: str | None) -> Any:
    """A payload value by key, a dotted key reading nested objects."""
    if not key:
        return None
    if key in payload:
        return payload[key]
    value: Any = payload
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def forget_connections() -> None:
    """Close every client of this process (tests reopening a directory)."""
    _OPENED.clear()
    CLIENTS.clear()
