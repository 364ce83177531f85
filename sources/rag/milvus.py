"""The ``milvus`` backend: a Milvus collection searched with the platform embedder's query vector
(pymilvus' ``MilvusClient``).

``uri`` is a Milvus server, or a Milvus Lite file. Milvus Lite runs inside the process that opens
its file and locks the file to that process: so one client per connection per process
(``ClientPool``), reused by every request, and a file another process holds is refused in those
words (a Milvus Lite file serves one platform process, for development; a Milvus server serves
any number). A collection reopened (a restarted process, a file filled by another process) is not
loaded, and Milvus searches only loaded collections: each collection is loaded when this process
first opens it, and again if a search finds it released.

Scores: the collection's metric, turned into cosine similarity (``COSINE`` and ``IP`` over
unit vectors are cosines already; ``L2``'s squared distance d over unit vectors is 1 - d/2).
The source's ``filter`` becomes a Milvus boolean expression (equality on the metadata field's
keys, ``json_contains_all`` for lists), and-ed with ``filter_expression``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
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
from sources.rag.vector_configs import MilvusConfig
from sources.recall import RecallHit

CLIENTS = ClientPool()
NOT_LOADED = 101  # Milvus' code for a search of a released collection
VECTOR_TYPES = {"FLOAT_VECTOR", "FLOAT16_VECTOR", "BFLOAT16_VECTOR"}
METRIC_TO_COSINE = {
    "COSINE": lambda distance: distance,
    "IP": lambda distance: distance,
    "L2": lambda distance: 1.0 - distance / 2.0,
}
HNSW_EF_FLOOR = 64  # search breadth for HNSW indexes: at least this, at least the top_k


@dataclass(frozen=True)
class Opened:
    """What the backend needs to know of one collection, read when it is first opened."""

    vector_field: str
    metric: str
    index_type: str
    field_types: dict[str, str]


# (connection key, collection) -> Opened: collections this process has loaded.
_OPENED: OpenedCollections[Opened] = OpenedCollections()


def lite_file_held_elsewhere(path: str) -> bool:
    """Whether another process holds the Milvus Lite file's lock (milvus-lite's ``LOCK`` file;
    ``flock`` conflicts within one process too, so this process's own servers are asked first)."""
    from milvus_lite.server_manager import server_manager_instance

    with server_manager_instance._lock:
        if os.path.abspath(path) in server_manager_instance._servers:
            return False
    lock_path = os.path.join(path, "LOCK")
    if not os.path.exists(lock_path):
        return False
    descriptor = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return False
    finally:
        os.close(descriptor)


# A Milvus Lite server (gRPC in this process) accepts no keepalive pings between calls: an idle
# client pinging it every 10 s (pymilvus' default) is sent GOAWAY "too_many_pings" and cannot
# reconnect. The backend's own connection to a Lite file pings only while a call is running.
LITE_CHANNEL = {"grpc.keepalive_permit_without_calls": 0, "grpc.keepalive_time_ms": 300_000}


def open_client(target: Target, seconds: float) -> Any:
    from pymilvus import MilvusClient

    options: dict[str, Any] = {}
    if target.local:
        options = {"grpc_options": dict(LITE_CHANNEL), "dedicated": True}
    try:
        return MilvusClient(
            uri=target.address, token=target.secret or "", timeout=seconds, **options
        )
    except Exception as error:
        if target.local and lite_file_held_elsewhere(target.address):
            raise BackendError(
                f"milvus: the Milvus Lite file {os.path.basename(target.address)} is open in "
                "another process; a Milvus Lite file serves one platform process (development), "
                "a Milvus server any number"
            ) from error
        raise


def literal(value: Any, where: str) -> str:
    """A Milvus expression literal (strings double-quoted with C escapes)."""
    value = scalar(value, where)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if any(ord(c) < 32 and c not in "\n\r\t" for c in value):
        raise BackendError(f"filter {where}: control characters cannot be matched")
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def field_reference(path: tuple[str, ...], metadata_field: str | None) -> tuple[str, str]:
    """(the expression naming ``path``, the top-level field it is under)."""
    if metadata_field:
        top, keys = metadata_field, path
    else:
        top, keys = path[0], path[1:]
        if not top.isidentifier():
            raise BackendError(
                f"filter key {top!r}: not a Milvus field name (set metadata_field to filter on "
                "a JSON field's keys)"
            )
    return top + "".join(f"[{literal(key, '.'.join(path))}]" for key in keys), top


def expression(
    wanted: dict[str, Any] | None,
    metadata_field: str | None,
    extra: str | None,
    field_types: dict[str, str],
) -> str:
    parts = []
    for path, value in filter_items(wanted):
        where = ".".join(path)
        reference, top = field_reference(path, metadata_field)
        if isinstance(value, list):
            values = ", ".join(literal(item, where) for item in value)
            function = (
                "array_contains_all" if field_types.get(top) == "ARRAY" else "json_contains_all"
            )
            parts.append(f"{function}({reference}, [{values}])")
        else:
            parts.append(f"{reference} == {literal(value, where)}")
    if extra:
        parts.append(f"({extra})")
    return " and ".join(parts)


class MilvusBackend(EngineBackend):
    name = "milvus"
    engine = "milvus"
    platform_setting = "VECTOR_MILVUS_URI"
    platform_secret_setting = "VECTOR_MILVUS_TOKEN"
    config: MilvusConfig

    def __init__(self, config: MilvusConfig):
        super().__init__(config, config.uri, config.token)

    def search(self, search: Search, seconds: float) -> list[RecallHit]:
        target = self.target(search.schema)
        check_remote(target, search.allowlist)
        key = connection_key(target)
        client = CLIENTS.get(key, lambda: open_client(target, seconds))
        try:
            return self.search_loaded(client, key, target, search, seconds)
        except Exception as error:
            # What this process knew of the collection is read again next time (it may have been
            # released, dropped or made anew by another client of the server).
            _OPENED.pop((key, target.collection), None)
            if getattr(error, "code", None) != NOT_LOADED:
                if not isinstance(error, BackendError):
                    CLIENTS.drop(key)  # a broken connection is opened anew by the next fetch
                raise
        return self.search_loaded(client, key, target, search, seconds)  # loads it again

    def search_loaded(
        self, client: Any, key: tuple[str, ...], target: Target, search: Search, seconds: float
    ) -> list[RecallHit]:
        opened = self.opened(client, key, target.collection, seconds)
        content, metadata = self.config.content_field, self.config.metadata_field
        output = [content, *([metadata] if metadata else [])]
        ef = max(HNSW_EF_FLOOR, search.top_k)
        params: dict[str, Any] = {"metric_type": opened.metric}
        if opened.index_type.startswith("HNSW"):
            params["params"] = {"ef": ef}
        answer = client.search(
            target.collection,
            data=[search.vector],
            anns_field=opened.vector_field,
            limit=search.top_k,
            filter=expression(
                search.wanted, metadata, self.config.filter_expression, opened.field_types
            ),
            output_fields=output,
            search_params=params,
            timeout=seconds,
        )
        to_cosine = METRIC_TO_COSINE[opened.metric]
        hits = []
        for found in answer[0] if answer else []:
            entity = found.get("entity") or {}
            hit = engine_hit(
                search,
                collection=self.config.collection,
                document_id=str(found.get("id", "")),
                cosine=float(to_cosine(float(found.get("distance", 0.0)))),
                text=entity.get(content),
                metadata=entity.get(metadata) if metadata else None,
            )
            if hit is not None:
                hits.append(hit)
        return hits

    def opened(self, client: Any, key: tuple[str, ...], collection: str, seconds: float) -> Opened:
        """The collection's shape, read and loaded the first time this process opens it."""
        known = _OPENED.get((key, collection))
        if known is not None:
            return known
        if not client.has_collection(collection, timeout=seconds):
            raise BackendError(f"milvus: no collection named {collection!r}")
        described = client.describe_collection(collection, timeout=seconds)
        types = {f["name"]: getattr(f["type"], "name", str(f["type"])) for f in described["fields"]}
        vector_field = self.vector_field(described["fields"])
        dimensions = next(
            int(f.get("params", {}).get("dim", 0))
            for f in described["fields"]
            if f["name"] == vector_field
        )
        check_dimensions(self.engine, collection, dimensions)
        for name in (self.config.content_field, self.config.metadata_field):
            if name and name not in types and not described.get("enable_dynamic_field"):
                raise BackendError(f"milvus: collection {collection!r} has no field {name!r}")
        metric, index_type = self.index_of(client, collection, vector_field, seconds)
        state = client.get_load_state(collection, timeout=seconds).get("state")
        if getattr(state, "name", str(state)) != "Loaded":
            client.load_collection(collection, timeout=seconds)
        opened = Opened(vector_field, metric, index_type, types)
        _OPENED[(key, collection)] = opened
        return opened

    def vector_field(self, fields: list[dict[str, Any]]) -> str:
        vectors = [
            f["name"] for f in fields if getattr(f["type"], "name", str(f["type"])) in VECTOR_TYPES
        ]
        wanted = self.config.vector_field
        if wanted:
            if wanted not in vectors:
                raise BackendError(f"milvus: {wanted!r} is not a float vector field")
            return wanted
        if len(vectors) != 1:
            found = ", ".join(vectors) or "none"
            raise BackendError(f"milvus: name the vector field (vector_field); found {found}")
        return vectors[0]

    @staticmethod
    def index_of(client: Any, collection: str, field: str, seconds: float) -> tuple[str, str]:
        for name in client.list_indexes(collection, timeout=seconds) or []:
            described = client.describe_index(collection, name, timeout=seconds) or {}
            if described.get("field_name", name) == field:
                metric = str(described.get("metric_type", "COSINE")).upper()
                if metric not in METRIC_TO_COSINE:
                    raise BackendError(
                        f"milvus: the {field!r} index's metric {metric} gives no cosine "
                        "similarity (COSINE, IP or L2)"
                    )
                return metric, str(described.get("index_type", "")).upper()
        raise BackendError(f"milvus: collection {collection!r} has no index on {field!r}")


def forget_connections() -> None:
    """Close every client of this process (tests reopening a file, a fork)."""
    _OPENED.clear()
    CLIENTS.clear()
    with contextlib.suppress(ImportError):
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_all()
