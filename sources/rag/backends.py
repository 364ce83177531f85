"""RAG backends: where a source's documents come from. Each returns recall hits for a query."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from contextplatform.core.config_cache import ProcessCache
from sources.calibration import calibration_of
from sources.deadline import within_deadline
from sources.embedding import get_embedder
from sources.ingestion import ensure_embedder_matches
from sources.judge_calibration import JudgeCalibration
from sources.matching import AppliedRecall, RecallConfig, rag_recall
from sources.models import Collection
from sources.rag.config import VectorstoreConfig
from sources.recall import RecallHit, newest_chunks, recall
from sources.signals import COLLECTIONS_CACHE

# Every RAG fetch reads its collections (their versions make the result cache's token): kept per
# process and tenant schema; dropped when a collection is saved, deleted, re-indexed or
# recalibrated (sources.signals, and the writes that use update()).
COLLECTIONS: ProcessCache[tuple[str, tuple[str, ...]], list[Collection]] = ProcessCache(
    COLLECTIONS_CACHE
)


def collections_key(schema: str, names: list[str]) -> tuple[str, tuple[str, ...]]:
    """By the request's schema, never the connection's: this is read on the event loop too,
    whose connection is not the request's."""
    return schema, tuple(sorted(set(names)))


def kept_collections(schema: str, names: list[str], timeout_seconds: float) -> list[Collection]:
    """The collections, read under the fetch's deadline when this process does not keep them.
    (The cache is asked outside the deadline's transaction: what is read inside one is never
    kept.)"""

    def read() -> list[Collection]:
        return within_deadline(
            timeout_seconds, lambda: list(Collection.objects.filter(name__in=names))
        )

    if connection.schema_name != schema:  # kept under a schema only when read in that schema
        return read()
    return COLLECTIONS.get(collections_key(schema, names), read)


class BackendError(Exception):
    """The backend could not answer (unknown collection, transport error, bad response)."""


class BackendTimeout(BackendError, TimeoutError):
    """The backend's own ``timeout_ms`` (or what was left of the source's deadline) ended the
    retrieval: the source reports ``timeout``, and a hybrid backend falls back as for any error."""


def token_of(collections: list[Collection]) -> str:
    """The collections' change token: their versions, and the judge calibration's time too (a
    cached result was judged under the calibration it names)."""
    return ",".join(
        f"{c.pk}:{c.version}:{c.judge_calibrated_at.timestamp() if c.judge_calibrated_at else 0}"
        for c in sorted(collections, key=lambda c: c.pk)
    )


@dataclass(frozen=True)
class RetrievalRequest:
    schema: str
    query: str
    # None: a judge-only block reads the newest documents. A backend reads it ``resolved``: its
    # top_k and min_similarity written in.
    recall: RecallConfig | None
    candidates: int  # how many documents the judge may read
    filter: dict[str, Any] | None
    lexical_features: bool = True
    allowlist: tuple[str, ...] = ()
    timeout_seconds: float = 30.0  # the source's own timeout, also the database's deadline


class RagBackend(ABC):
    name: str
    # Its scores are cosines of the platform embedder's vectors (vectorstore, milvus, qdrant), so
    # an unwritten min_similarity is the embedder's default; the others score with their own
    # service's model and get the platform's generic one.
    platform_embedder: bool = False
    # It ranks the same chunks by embedding and by BM25 (the platform's own collections), so an
    # unwritten recall method fuses both.
    ranks_both_ways: bool = False
    applied: AppliedRecall | None = None  # what the recall ran with, once ``resolved``

    def resolved(self, request: RetrievalRequest) -> RetrievalRequest:
        """``request`` with the recall's unwritten values filled as this backend applies them."""
        if request.recall is None:
            return request
        # bm25 embeds no query and cuts at no similarity: no embedder to ask
        written = request.recall.method if "method" in request.recall.model_fields_set else None
        ours = self.platform_embedder and written != "bm25"
        embedder = get_embedder() if ours else None
        self.applied = rag_recall(request.recall, embedder, ranks_both_ways=self.ranks_both_ways)
        return replace(request, recall=self.applied.on(request.recall))

    @abstractmethod
    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]: ...

    async def cache_token(self, request: RetrievalRequest) -> str | None:
        """Changes whenever the backend's documents change; ``None`` when that cannot be known."""
        return self.cache_token_on_thread(request)

    def cache_token_on_thread(self, request: RetrievalRequest) -> str | None:
        """``cache_token`` for a caller on the request's thread, where the tenant's connection
        is: what it needs read there when this process does not keep it. A backend whose token
        needs a read overrides both."""
        return None

    def judge_calibrations(self) -> dict[str, JudgeCalibration]:
        """The local judge's calibration per collection name of the hits this backend returned;
        a hit's collection not named here is judged on the embedder's prior."""
        return {}


class VectorstoreBackend(RagBackend):
    """The tenant's own collections in PostgreSQL (pgvector HNSW + BM25)."""

    name = "vectorstore"
    platform_embedder = True
    ranks_both_ways = True

    def __init__(self, config: VectorstoreConfig):
        self.config = config
        self._collections: list[Collection] | None = None

    def collections(self, schema: str, timeout_seconds: float) -> list[Collection]:
        """Read once per backend (one fetch): the cache token and the recall see the same versions."""
        if self._collections is None:
            names = self.config.names
            found = kept_collections(schema, names, timeout_seconds)
            missing = sorted(set(names) - {c.name for c in found})
            if missing:
                raise BackendError(f"unknown collection(s): {', '.join(missing)}")
            self._collections = found
        return self._collections

    async def read_collections(self, request: RetrievalRequest) -> list[Collection]:
        kept = self.collections_at_hand(request)
        if kept is not None:  # kept by this process: no trip to a thread
            return kept
        return await sync_to_async(self.collections)(request.schema, request.timeout_seconds)

    def collections_at_hand(self, request: RetrievalRequest) -> list[Collection] | None:
        """The collections when this process keeps them all (no read); ``None`` otherwise."""
        if self._collections is None:
            found, kept = COLLECTIONS.peek(collections_key(request.schema, self.config.names))
            if found and kept is not None:
                self._collections = kept
        if self._collections is not None and not self._missing():
            return self._collections
        self._collections = None  # one is missing: read again, and refused there
        return None

    def _missing(self) -> bool:
        return len({c.name for c in self._collections or []}) < len(set(self.config.names))

    async def cache_token(self, request: RetrievalRequest) -> str | None:
        return token_of(await self.read_collections(request))

    def cache_token_on_thread(self, request: RetrievalRequest) -> str | None:
        kept = self.collections_at_hand(request)
        if kept is not None:
            return token_of(kept)
        return token_of(self.collections(request.schema, request.timeout_seconds))

    def judge_calibrations(self) -> dict[str, JudgeCalibration]:
        return {c.name: calibration_of(c) for c in self._collections or []}

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        collections = await self.read_collections(request)
        if request.recall is None:
            return await sync_to_async(within_deadline)(
                request.timeout_seconds,
                lambda: newest_chunks(collections, request.candidates, request.filter),
            )
        vector = None
        if request.recall.method != "bm25":
            embedder = get_embedder()
            for collection in collections:
                ensure_embedder_matches(collection, embedder)
            vector = await asyncio.to_thread(embedder.embed_query, request.query)
        return await sync_to_async(within_deadline)(
            request.timeout_seconds,
            lambda: self.recall(request, collections, vector),
        )

    @staticmethod
    def recall(
        request: RetrievalRequest, collections: list[Collection], vector: list[float] | None
    ) -> list[RecallHit]:
        return recall(
            schema=request.schema,
            collections=collections,
            query=request.query,
            method=request.recall.method,
            top_k=request.recall.top_k,
            min_similarity=request.recall.min_similarity,
            query_vector=vector,
            hybrid_mode=request.recall.hybrid_mode,
            wanted=request.filter,
            lexical_features=request.lexical_features,
        )
