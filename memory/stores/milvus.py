"""The tenant's memory collection in Milvus (a Milvus Lite file or a server), through the RAG
backend's connections (``sources.rag.milvus``: one client per file or server per process, the
Lite file refused in those words when another process holds it).

Lexical recall is Milvus' own BM25: a ``words`` text field (the memory's stemmed words,
``memory.stores.engines.words``) feeds a BM25 function into a sparse field, which Milvus scores
with each word's IDF over the collection; nothing is downloaded. Milvus Lite's analyzer has the
standard tokenizer only (no stemmer, no stop words), so the words are stemmed here, for the
memories and the question alike, and the analyzer only splits them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.selectors import require_user
from memory.stores.engines import ENGINE_TIMEOUT_S, IndexRow, finite, hits_of, live_bounds
from sources.embedding import get_embedder
from sources.rag.milvus import CLIENTS, open_client
from sources.rag.vector_backends import Target, connection_key

MAX_WORDS_CHARS = 60_000
_READY: set[tuple[tuple[str, ...], str]] = set()  # collections this process made or loaded
_READY_LOCK = threading.Lock()


def quoted(text: str) -> str:
    """A Milvus string literal (user ids are checked text: no control characters)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


class MilvusMemoryIndex:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.key = connection_key(target)

    @property
    def client(self) -> Any:
        return CLIENTS.get(self.key, lambda: open_client(self.target, ENGINE_TIMEOUT_S))

    @property
    def name(self) -> str:
        return self.target.collection

    @staticmethod
    def of_user(user_id: str) -> str:
        """The one place the user's filter is written: every read and the user's erase."""
        return f"user_id == {quoted(require_user(user_id))}"

    def scope(self, user_id: str, at: datetime | None) -> str:
        """What a recall reads: the user's vectors live at ``at`` (now when None)."""
        outlast, existed_by = live_bounds(at)
        expression = (
            f"{self.of_user(user_id)} and expires > {outlast!r} and superseded > {outlast!r}"
        )
        if existed_by is not None:
            expression += f" and created <= {existed_by!r}"
        return expression

    def ensure(self) -> None:
        with _READY_LOCK:
            if (self.key, self.name) in _READY:
                return
        client = self.client
        if not client.has_collection(self.name, timeout=ENGINE_TIMEOUT_S):
            self.create(client)
        else:
            state = client.get_load_state(self.name, timeout=ENGINE_TIMEOUT_S).get("state")
            if getattr(state, "name", str(state)) != "Loaded":
                client.load_collection(self.name, timeout=ENGINE_TIMEOUT_S)
        with _READY_LOCK:
            _READY.add((self.key, self.name))

    def create(self, client: Any) -> None:
        from pymilvus import DataType, Function, FunctionType

        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("user_id", DataType.VARCHAR, max_length=200)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=get_embedder().dimensions)
        schema.add_field(
            "words", DataType.VARCHAR, max_length=MAX_WORDS_CHARS, enable_analyzer=True
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        for name in ("created", "expires", "superseded"):
            schema.add_field(name, DataType.DOUBLE)
        schema.add_function(
            Function(
                name="words_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["words"],
                output_field_names=["sparse"],
            )
        )
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        index.add_index(field_name="user_id", index_type="INVERTED")
        # Strong: a memory written a moment ago is recalled by the next turn.
        client.create_collection(
            self.name,
            schema=schema,
            index_params=index,
            consistency_level="Strong",
            timeout=ENGINE_TIMEOUT_S,
        )

    def reset(self) -> None:
        """Emptied, not dropped: making a collection and its indexes anew takes Milvus a second
        or two, deleting every row of a tenant's memories far less. Dropped and made anew where
        its vectors are not the embedder's size (the platform changed its embedder)."""
        self.ensure()
        client = self.client
        described = client.describe_collection(self.name, timeout=ENGINE_TIMEOUT_S)
        sizes = [
            int(f.get("params", {}).get("dim", 0))
            for f in described["fields"]
            if f["name"] == "vector"
        ]
        if sizes != [get_embedder().dimensions]:
            with _READY_LOCK:
                _READY.discard((self.key, self.name))
            client.drop_collection(self.name, timeout=ENGINE_TIMEOUT_S)
            self.ensure()
            return
        client.delete(self.name, filter="id >= 0", timeout=ENGINE_TIMEOUT_S)

    def drop(self) -> None:
        with _READY_LOCK:
            _READY.discard((self.key, self.name))
        client = self.client
        if client.has_collection(self.name, timeout=ENGINE_TIMEOUT_S):
            client.drop_collection(self.name, timeout=ENGINE_TIMEOUT_S)

    def upsert(self, rows: Sequence[IndexRow]) -> None:
        if not rows:
            return
        self.ensure()
        self.client.upsert(
            self.name,
            [
                {
                    "id": row.id,
                    "user_id": row.user_id,
                    "vector": row.vector,
                    "words": " ".join(row.words)[:MAX_WORDS_CHARS],
                    "created": row.created,
                    "expires": row.expires,
                    "superseded": row.superseded,
                }
                for row in rows
            ],
            timeout=ENGINE_TIMEOUT_S,
        )

    def delete(self, ids: Sequence[int]) -> None:
        if ids:
            self.ensure()
            self.client.delete(self.name, ids=list(ids), timeout=ENGINE_TIMEOUT_S)

    def erase(self, user_id: str) -> None:
        self.ensure()
        self.client.delete(self.name, filter=self.of_user(user_id), timeout=ENGINE_TIMEOUT_S)

    def held(self, user_id: str) -> set[int]:
        """The ids of every vector the index holds for the user, live or not (audits, tests)."""
        self.ensure()
        rows = self.client.query(
            self.name, filter=self.of_user(user_id), output_fields=["id"], timeout=ENGINE_TIMEOUT_S
        )
        return {int(row["id"]) for row in rows}

    def dense(
        self, user_id: str, vector: Sequence[float], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        self.ensure()
        answer = self.client.search(
            self.name,
            data=[list(vector)],
            anns_field="vector",
            limit=k,
            filter=self.scope(user_id, at),
            output_fields=["id"],
            search_params={"metric_type": "COSINE"},
            timeout=ENGINE_TIMEOUT_S,
        )
        return [(int(hit["id"]), finite(float(hit["distance"]))) for hit in hits_of(answer)]

    def lexical(
        self, user_id: str, terms: Sequence[str], k: int, at: datetime | None
    ) -> list[tuple[int, float]]:
        if not terms:
            return []
        self.ensure()
        answer = self.client.search(
            self.name,
            data=[" ".join(terms)],
            anns_field="sparse",
            limit=k,
            filter=self.scope(user_id, at),
            output_fields=["id"],
            search_params={"metric_type": "BM25"},
            timeout=ENGINE_TIMEOUT_S,
        )
        # Milvus Lite hands BM25 back negated (best the most negative); a server, positive.
        return [(int(hit["id"]), abs(finite(float(hit["distance"])))) for hit in hits_of(answer)]


def forget() -> None:
    """What this process knew of memory collections (tests reopening files)."""
    with _READY_LOCK:
        _READY.clear()
