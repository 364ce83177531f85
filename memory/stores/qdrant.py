"""The tenant's memory collection in Qdrant (a server, or a local-mode directory), through the
RAG backend's connections (``sources.rag.qdrant``: one client per server or directory per
process, calls to a local client taken in turns).

Lexical recall is a sparse vector per memory, made here: each stemmed word's BM25 frequency part
(``memory.stores.engines.term_weights``) under the word's CRC-32, in a sparse vector whose IDF
modifier has Qdrant weigh each word by its rarity in the collection; the question's words are the
query, one each. Both the server and the local mode score it; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from memory.selectors import require_user
from memory.stores.engines import (
    ENGINE_TIMEOUT_S,
    IndexRow,
    finite,
    live_bounds,
    term_id,
    term_weights,
)
from sources.embedding import get_embedder
from sources.rag.qdrant import CLIENTS, local_lock, open_client
from sources.rag.vector_backends import Target, connection_key

DENSE = "dense"
SPARSE = "words"
_READY: set[tuple[tuple[str, ...], str]] = set()


class QdrantMemoryIndex:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.key = connection_key(target)

    @property
    def name(self) -> str:
        return self.target.collection

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        client = CLIENTS.get(self.key, lambda: open_client(self.target, ENGINE_TIMEOUT_S))
        lock = local_lock(self.target)
        if lock is None:
            yield client
            return
        with lock:
            yield client

    @staticmethod
    def of_user(user_id: str) -> Any:
        """The one place the user's filter is written: every read and the user's erase."""
        from qdrant_client import models

        return models.FieldCondition(
            key="user_id", match=models.MatchValue(value=require_user(user_id))
        )

    def scope(self, user_id: str, at: datetime | None) -> Any:
        """What a recall reads: the user's points live at ``at`` (now when None)."""
        from qdrant_client import models

        outlast, existed_by = live_bounds(at)
        must = [
            self.of_user(user_id),
            models.FieldCondition(key="expires", range=models.Range(gt=outlast)),
            models.FieldCondition(key="superseded", range=models.Range(gt=outlast)),
        ]
        if existed_by is not None:
            must.append(models.FieldCondition(key="created", range=models.Range(lte=existed_by)))
        return models.Filter(must=must)

    def ensure(self) -> None:
        if (self.key, self.name) in _READY:
            return
        with self.client() as client:
            if not client.collection_exists(self.name):
                self.create(client)
        _READY.add((self.key, self.name))

    def create(self, client: Any) -> None:
        from qdrant_client import models

        client.create_collection(
            self.name,
            vectors_config={
                DENSE: models.VectorParams(
                    size=get_embedder().dimensions, distance=models.Distance.COSINE
                )
            },
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        if not self.target.local:  # the local mode has no payload indexes
            client.create_payload_index(
                self.name, "user_id", field_schema=models.PayloadSchemaType.KEYWORD
            )

    def reset(self) -> None:
        """Dropped and made anew (the embedder's size, whatever the old one's was)."""
        _READY.discard((self.key, self.name))
        with self.client() as client:
            if client.collection_exists(self.name):
                client.delete_collection(self.name)
        self.ensure()

    def drop(self) -> None:
        _READY.discard((self.key, self.name))
        with self.client() as client:
            if client.collection_exists(self.name):
                client.delete_collection(self.name)

    def upsert(self, rows: Sequence[IndexRow]) -> None:
        from qdrant_client import models

        if not rows:
            return
        self.ensure()
        points = []
        for row in rows:
            vectors: dict[str, Any] = {DENSE: row.vector}
            weights = term_weights(row.words)
            if weights:
                vectors[SPARSE] = models.SparseVector(
                    indices=list(weights), values=list(weights.values())
                )
            points.append(
                models.PointStruct(
                    id=row.id,
                    vector=vectors,
                    payload={
                        "user_id": row.user_id,
                        "created": row.created,
                        "expires": row.expires,
                        "superseded": row.superseded,
                    },
                )
            )
        with self.client() as client:
            client.upsert(self.name, points=points, wait=True)

    def delete(self, ids: Sequence[int]) -> None:
        from qdrant_client import models

        if not ids:
            return
        self.ensure()
        with self.client() as client:
            client.delete(
                self.name, points_selector=models.PointIdsList(points=list(ids)), wait=True
            )

    def erase(self, user_id: str) -> None:
        from qdrant_client import models

        self.ensure()
        selector = models.FilterSelector(filter=models.Filter(must=[self.of_user(user_id)]))
        with self.client() as client:
            client.delete(self.name, points_selector=selector, wait=True)

    def held(self, user_id: str) -> set[int]:
        """The ids of every point the index holds for the user, live or not (audits, tests)."""
        from qdrant_client import models

        self.ensure()
        found: set[int] = set()
        offset = None
        with self.client() as client:
            while True:
                points, offset = client.scroll(
                    self.name,
                    scroll_filter=models.Filter(must=[self.of_user(user_id)]),
                    limit=1000,
                    offset=offset,
                    with_payload=False,
                )
                found.update(int(point.id) for point in points)
                if offset is None:
                    return found

    def dense(
        self, user_id: str, vector: Sequence[float], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        self.ensure()
        with self.client() as client:
            answer = client.query_points(
                self.name,
                query=list(vector),
                using=DENSE,
                query_filter=self.scope(user_id, at),
                limit=k,
                with_payload=False,
                timeout=round(ENGINE_TIMEOUT_S),
            )
        return [(int(point.id), finite(float(point.score))) for point in answer.points]

    def lexical(
        self, user_id: str, terms: Sequence[str], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        from qdrant_client import models

        indices = sorted({term_id(word) for word in terms})
        if not indices:
            return []
        self.ensure()
        with self.client() as client:
            answer = client.query_points(
                self.name,
                query=models.SparseVector(indices=indices, values=[1.0] * len(indices)),
                using=SPARSE,
                query_filter=self.scope(user_id, at),
                limit=k,
                with_payload=False,
                timeout=round(ENGINE_TIMEOUT_S),
            )
        return [
            (int(point.id), finite(float(point.score)))
            for point in answer.points
            if point.score > 0
        ]


def forget() -> None:
    """What this process knew of memory collections (tests reopening directories)."""
    _READY.clear()
