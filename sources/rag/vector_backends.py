"""What the ``milvus`` and ``qdrant`` backends share: the query vector from the platform's
embedder, the blocking engine call run in a thread within the source's deadline, where a
connection goes (the tenant's server through the outbound guard, a local file of the tenant's, or
the platform's server), the source's ``filter`` as plain key paths, and errors worded without the
secret.

The engines' clients block (gRPC for Milvus, httpx or an embedded store for Qdrant), so each
search runs in a thread of a small pool of its own: a hung server holds those threads, never the
event loop's default executor (which the embedder and the database calls use). The thread is
given what is left of the source's deadline as the engine call's own timeout; the source does not
wait past the deadline in any case (``BackendTimeout``: the source reports ``timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import math
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

from cachetools import LRUCache
from django.conf import settings

from contextplatform.core.outbound.policy import OutboundError
from contextplatform.core.outbound.urls import check_url
from sources import fetch_deadline
from sources.embedding import get_embedder
from sources.rag.backends import BackendError, BackendTimeout, RagBackend, RetrievalRequest
from sources.rag.vector_configs import MilvusConfig, QdrantConfig
from sources.recall import RecallHit
from sources.secret_settings import SecretUnavailable, SecretValue

T = TypeVar("T")
V = TypeVar("V")

# Threads that may wait on vector databases at once, per process.
ENGINE_THREADS = 8
_POOL = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="vector-backend")
PLATFORM_SEPARATOR = "__"  # <tenant schema>__<collection> on the platform's servers


def revealed(secret: SecretValue | None) -> str | None:
    """The plain secret, decrypted now (the backend is being built for a fetch)."""
    if secret is None:
        return None
    try:
        return secret.reveal()
    except SecretUnavailable as error:
        raise BackendError(str(error)) from None


def scrubbed(text: str, *secrets: str | None) -> str:
    """``text`` without any of ``secrets`` (an engine's error may quote what it was given)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text[:500]


# --- where a connection goes ---------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One resolved connection: a server URL or a local path, and the collection's name there."""

    kind: str  # "remote" (the tenant's server), "platform" (the platform's), "local" (a file)
    address: str  # the URL, or the absolute local path
    collection: str
    secret: str | None

    @property
    def local(self) -> bool:
        """A file or directory of this process (a tenant's, or the platform's own path)."""
        return "://" not in self.address


def connection_key(target: Target) -> tuple[str, ...]:
    """The key of a target's client in an engine's ``ClientPool``: a server is keyed by its secret
    too (a digest of it), so sources holding other keys for one server never share a client."""
    if target.local:
        return ("local", target.address)
    digest = hashlib.sha256((target.secret or "").encode()).hexdigest()
    return (target.kind, target.address, digest)


def tenant_directory(schema: str) -> Path:
    """The tenant's own directory for Milvus Lite files and Qdrant local-mode directories."""
    root = Path(settings.VECTOR_LOCAL_ROOT)
    directory = (root / schema).resolve()
    if directory.parent != root.resolve():  # a schema name is one path segment; say so anyway
        raise BackendError("the tenant's vector directory is not under VECTOR_LOCAL_ROOT")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def resolve_target(
    *,
    written: str | None,
    reuse: bool,
    platform: str,
    platform_secret: str,
    collection: str,
    secret: str | None,
    schema: str,
    engine: str,
    setting: str,
) -> Target:
    """Where a source's ``uri``/``url`` leads (its config validated the form already)."""
    if written is None or reuse:
        if not platform:
            raise BackendError(
                f"{engine}: the source names no server and the platform has none "
                f"({setting} is not set)"
            )
        return Target(
            "platform",
            platform,
            f"{schema}{PLATFORM_SEPARATOR}{collection}",
            secret or platform_secret or None,
        )
    if "://" in written:
        return Target("remote", written, collection, secret)
    return Target("local", str(tenant_directory(schema) / written), collection, secret)


def check_remote(target: Target, allowlist: tuple[str, ...]) -> None:
    """The tenant's own server: its host must pass the outbound guard (checked on the addresses
    the name resolves to now; the engine's client then connects on its own)."""
    if target.kind != "remote":
        return
    parts = urlsplit(target.address)
    scheme = "https" if parts.scheme == "https" else "http"
    try:
        check_url(urlunsplit((scheme, parts.netloc, parts.path, "", "")), list(allowlist))
    except OutboundError as error:
        raise BackendError(str(error)) from None


class ClientPool:
    """One engine client per connection per process, reused by every source and request (a Milvus
    Lite file or a Qdrant local directory can be open in one client of one process only)."""

    def __init__(self, limit: int = 64) -> None:
        self.clients: dict[tuple[str, ...], Any] = {}
        self.lock = threading.Lock()
        self.limit = limit

    def get(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        with self.lock:
            client = self.clients.get(key)
            if client is not None:
                return client
        made = make()  # outside the lock: connecting may take a while
        with self.lock:
            if key in self.clients:  # another thread made one meanwhile: keep the first
                close_quietly(made)
                return self.clients[key]
            if len(self.clients) >= self.limit:
                oldest = next(iter(self.clients))
                close_quietly(self.clients.pop(oldest))
            self.clients[key] = made
            return made

    def drop(self, key: tuple[str, ...]) -> None:
        with self.lock:
            client = self.clients.pop(key, None)
        if client is not None:
            close_quietly(client)

    def clear(self) -> None:
        """Close every client of the pool (tests reopening a file, a fork)."""
        with self.lock:
            keys = list(self.clients)
        for key in keys:
            self.drop(key)


class OpenedCollections(Generic[V]):
    """What a process read of each collection it opened, by (connection, collection): bounded,
    least recently used dropped, since on the platform's servers every tenant's collections are
    collections of their own (a dropped one is described again when next opened)."""

    def __init__(self, limit: int = 4096) -> None:
        self.kept: LRUCache[tuple[tuple[str, ...], str], V] = LRUCache(maxsize=limit)
        self.lock = threading.Lock()  # an LRUCache reorders itself on reads

    def get(self, key: tuple[tuple[str, ...], str]) -> V | None:
        with self.lock:
            return self.kept.get(key)

    def __setitem__(self, key: tuple[tuple[str, ...], str], value: V) -> None:
        with self.lock:
            self.kept[key] = value

    def pop(self, key: tuple[tuple[str, ...], str], default: V | None = None) -> V | None:
        with self.lock:
            return self.kept.pop(key, default)

    def clear(self) -> None:
        with self.lock:
            self.kept.clear()

    def __len__(self) -> int:
        return len(self.kept)


def close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):  # closing a broken client: nothing left to do
        client.close()


# --- the source's filter -------------------------------------------------------------------------


def filter_items(wanted: dict[str, Any] | None) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The filter as (key path, value) pairs: nested objects become longer paths (JSON
    containment of an object is containment of each of its members)."""

    def walk(prefix: tuple[str, ...], value: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
        if isinstance(value, dict) and value:
            for key, member in value.items():
                yield from walk((*prefix, str(key)), member)
        else:
            yield prefix, value

    for key, value in (wanted or {}).items():
        yield from walk((str(key),), value)


def scalar(value: Any, where: str) -> str | int | float | bool:
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise BackendError(
        f"filter {where}: {type(value).__name__} values cannot be matched here "
        "(strings, numbers, booleans or lists of them)"
    )


# --- what an engine answers ---------------------------------------------------------------------


def check_dimensions(engine: str, collection: str, dimensions: int) -> None:
    """A collection's vectors must be the platform embedder's: its query vector is searched."""
    expected = get_embedder().dimensions
    if dimensions != expected:
        raise BackendError(
            f"{engine}: collection {collection!r} holds {dimensions}-dimension vectors; the "
            f"platform's embedder makes {expected} (fill it with the platform's embedder)"
        )


def engine_hit(
    search: Search,
    *,
    collection: str,
    document_id: str,
    cosine: float,
    text: Any,
    metadata: Any,
    title: Any = None,
) -> RecallHit | None:
    """One engine result as a hit, or None where the source would not keep it (under
    ``min_similarity``, or no text to give the model). A non-string content is given as JSON,
    a non-object metadata as none; the title is the metadata's, else ``title``."""
    if search.min_similarity is not None and cosine < search.min_similarity:
        return None
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    data = metadata if isinstance(metadata, dict) else {}
    title = data.get("title", title)
    return RecallHit(
        chunk_id=None,
        document_id=document_id,
        title=title if isinstance(title, str) else "",
        text=text if isinstance(text, str) else json.dumps(text, ensure_ascii=False),
        collection=collection,
        metadata=data,
        cosine=cosine,
        score=cosine,
    )


# --- the backend ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    """One engine search: the query vector and what the source asks of it."""

    vector: list[float]
    top_k: int
    min_similarity: float | None
    wanted: dict[str, Any] | None
    schema: str
    allowlist: tuple[str, ...]


class EngineBackend(RagBackend):
    """A vector database searched with the platform embedder's query vector; hits carry cosine
    similarities, so the match block (recall threshold, judge) runs as for every backend."""

    engine: str
    platform_embedder = True
    # The platform's own server of this engine, and its secret (settings' names).
    platform_setting: str
    platform_secret_setting: str
    config: MilvusConfig | QdrantConfig

    def __init__(
        self,
        config: MilvusConfig | QdrantConfig,
        written: str | None,
        secret: SecretValue | None,
    ) -> None:
        self.config = config
        self.written = written  # the config's server URL or local name (``uri``/``url``)
        self.secret = revealed(secret)

    def target(self, schema: str) -> Target:
        return resolve_target(
            written=self.written,
            reuse=self.config.reuse_cache_connection,
            platform=getattr(settings, self.platform_setting),
            platform_secret=getattr(settings, self.platform_secret_setting),
            collection=self.config.collection,
            secret=self.secret,
            schema=schema,
            engine=self.engine,
            setting=self.platform_setting,
        )

    def secrets(self) -> tuple[str | None, ...]:
        """The plain secrets this backend holds (kept out of every message)."""
        return (self.secret, getattr(settings, self.platform_secret_setting))

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        recall = request.recall
        embedder = get_embedder()
        vector = await asyncio.to_thread(embedder.embed_query, request.query)
        search = Search(
            vector=vector,
            top_k=recall.top_k if recall else request.candidates,
            min_similarity=recall.min_similarity if recall else None,
            wanted=request.filter,
            schema=request.schema,
            allowlist=request.allowlist,
        )
        return await self.in_thread(lambda seconds: self.search(search, seconds), request)

    async def in_thread(self, call: Callable[[float], T], request: RetrievalRequest) -> T:
        left = fetch_deadline.remaining()
        seconds = request.timeout_seconds if left is None else left
        if seconds <= 0:
            raise BackendTimeout(f"{self.engine}: no time left before the source's deadline")
        context = contextvars.copy_context()
        future = _POOL.submit(context.run, call, seconds)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=seconds)
        except TimeoutError as error:
            raise BackendTimeout(
                f"{self.engine}: no answer within the source's deadline ({seconds * 1000:.0f} ms)"
            ) from error
        except BackendError:
            raise
        except Exception as error:
            raise BackendError(self.describe(error)) from error

    def describe(self, error: BaseException) -> str:
        text = str(error) or type(error).__name__
        return scrubbed(f"{self.engine}: {type(error).__name__}: {text}", *self.secrets())

    @abstractmethod
    def search(self, search: Search, seconds: float) -> list[RecallHit]:
        """The engine's answer (blocking; in a pool thread), best first, at most ``top_k``."""
