"""What the Milvus and Qdrant memory indexes share: the rows they hold, where their connection
goes, the words of a memory's text index, and the interface ``memory.stores.external`` recalls
through.

PostgreSQL stays the memories' system of record (``memory.models.Memory``); an external index
holds, per memory, only what recall ranks and filters by: the id, the user, the embedding, the
memory's stemmed words (for the engine's lexical side) and the three times that say whether it is
live (created, expires, superseded). Every hit an index finds is read back from PostgreSQL
through ``live_memories`` (the user's, live), so a vector the index still holds for a deleted,
expired or another user's memory is never recalled.

One collection per tenant, ``_memories__<tenant schema>``, wherever the store is: a Milvus Lite
file or a Qdrant local directory of the tenant's own (``VECTOR_LOCAL_ROOT/<schema>/``), the
tenant's server (through the outbound guard), or the platform's server (``VECTOR_MILVUS_URI``,
``VECTOR_QDRANT_URL``, with the platform's key). The leading underscore keeps it apart from every
rag collection on the platform's server, each named ``<tenant schema>__<name>``, so beginning
with a schema's lower-case letter: no tenant's rag source can name another's (or its own) memory
collection, whatever ``__`` a schema name holds.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import bm25s
from django.conf import settings
from django_tenants.utils import get_tenant_model

from contextplatform.core.bm25 import K1, B
from sources.lexical import STEMMER
from sources.rag.vector_backends import Target, check_remote, resolve_target

COLLECTION = "_memories"
NEVER = 1e15  # seconds since the epoch standing for "no expiry", "not superseded" (year 33,658)
ENGINE_TIMEOUT_S = 10.0  # one engine call's own limit (a recall is bounded by its source too)
# BM25's length norm needs the collection's average length; memories are a sentence or two, so
# a fixed average (in words, after stop words) stands in for one the index would have to keep.
AVERAGE_WORDS = 8.0


@dataclass(frozen=True)
class IndexRef:
    """Which external index: the engine and the ``uri``/``url`` as the route writes it ("" for
    the platform's server)."""

    backend: str  # "milvus" | "qdrant"
    written: str


@dataclass(frozen=True)
class IndexRow:
    """One memory as an index holds it."""

    id: int
    user_id: str
    vector: list[float]
    words: list[str]
    created: float
    expires: float
    superseded: float


def seconds(moment: datetime | None, default: float = NEVER) -> float:
    return default if moment is None else moment.timestamp()


def words(text: str) -> list[str]:
    """The text's stemmed words, English stop words dropped (as the RAG's lexical index reads
    text, ``sources.lexical``): the words both engines index and query by."""
    found = bm25s.tokenize(
        [text.lower().replace("_", " ")],
        stopwords="en",
        stemmer=STEMMER,
        return_ids=False,
        show_progress=False,
    )
    return list(found[0]) if found else []


def term_id(word: str) -> int:
    """A word's dimension in a sparse vector (CRC-32: stable across processes and versions)."""
    return zlib.crc32(word.encode())


def term_weights(terms: Sequence[str]) -> dict[int, float]:
    """A memory's sparse vector: each word's BM25 frequency part (k1, b of
    ``contextplatform.core.bm25``), the engine multiplying in each word's IDF over the collection."""
    counts: dict[int, int] = {}
    for word in terms:
        counts[term_id(word)] = counts.get(term_id(word), 0) + 1
    norm = K1 * (1 - B + B * len(terms) / AVERAGE_WORDS)
    return {index: count * (K1 + 1) / (count + norm) for index, count in counts.items()}


def live_bounds(at: datetime | None) -> tuple[float, float | None]:
    """(the time a live memory must outlast, the time it must exist by or None): now, or
    ``as_of`` for a rerun of a recorded request (as ``memory.selectors.live_memories`` reads)."""
    if at is None:
        return time.time(), None
    moment = at.timestamp()
    return moment, moment


def finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def tenant_target(ref: IndexRef, schema: str) -> Target:
    """Where the tenant's memory collection lives, resolved as the RAG backends resolve a
    ``uri``/``url``, the collection named after the tenant whatever the server."""
    if ref.backend == "milvus":
        platform, secret, setting = (
            settings.VECTOR_MILVUS_URI,
            settings.VECTOR_MILVUS_TOKEN,
            "VECTOR_MILVUS_URI",
        )
    else:
        platform, secret, setting = (
            settings.VECTOR_QDRANT_URL,
            settings.VECTOR_QDRANT_API_KEY,
            "VECTOR_QDRANT_URL",
        )
    target = resolve_target(
        written=ref.written or None,
        reuse=False,
        platform=platform,
        platform_secret=secret,
        collection=COLLECTION,
        secret=None,
        schema=schema,
        engine=ref.backend,
        setting=setting,
    )
    target = dataclasses.replace(target, collection=f"{COLLECTION}__{schema}")
    check_remote(target, allowlist(schema))
    return target


def allowlist(schema: str) -> tuple[str, ...]:
    """The tenant's outbound allow-list (its own server's host is checked against it)."""
    found = (
        get_tenant_model()
        .objects.filter(schema_name=schema)
        .values_list("outbound_allowlist", flat=True)
        .first()
    )
    return tuple(found or ())


class EngineIndex(Protocol):
    """One tenant's memory collection in an engine. Every read and every per-user delete goes
    through the engine's one ``scope`` (the user's filter), never another way."""

    target: Target

    def ensure(self) -> None:
        """The collection exists (made with the embedder's dimensions) and is searchable."""

    def reset(self) -> None:
        """The collection emptied (made first if missing, made anew if its vectors are not the
        embedder's size)."""

    def drop(self) -> None:
        """The collection gone (its tenant deleted)."""

    def upsert(self, rows: Sequence[IndexRow]) -> None: ...

    def delete(self, ids: Sequence[int]) -> None: ...

    def erase(self, user_id: str) -> None:
        """Every vector of the user."""

    def held(self, user_id: str) -> set[int]:
        """The ids of every vector the index holds for the user, live or not."""

    def dense(
        self, user_id: str, vector: Sequence[float], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        """The user's live memories nearest ``vector``: (id, cosine), best first."""

    def lexical(
        self, user_id: str, terms: Sequence[str], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        """The user's live memories best matching any of ``terms`` by BM25: (id, score)."""


def hits_of(answer: Any) -> list[Any]:
    return list(answer[0]) if answer else []
