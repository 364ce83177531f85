"""``make bench`` section "backends" (``BENCH_ONLY=backends``): recall latency of the ``milvus``
backend on Milvus Lite and the ``qdrant`` backend on qdrant-client's local mode, beside the
``vectorstore`` backend (pgvector HNSW) measured in the same run, over the same 100,000
Cranfield-derived chunks and the same query vectors, with recall@10 against an exact scan.

The data is the retrieval section's (``scripts/bench_retrieval.py``): the Cranfield chunk vectors
of collection ``bench-cranfield`` (ingested when missing), replicated to 100,000 with the same
seeded noise, and the 225 Cranfield queries through the platform's embedder. The pgvector
collection is the retrieval section's ``bench-scale`` (loaded when its marker does not match); the
Milvus Lite file and the Qdrant local directory are the bench tenant's own
(``VECTOR_LOCAL_ROOT/bench/``), kept between runs while their marker matches.

Each measured call is the backend's own engine call as a fetch makes it, after the query is
embedded: ``sources.recall.nearest_chunks`` for vectorstore, ``MilvusBackend.search`` and
``QdrantBackend.search`` (the engine's search and the hits mapped, cosine scores) for the others,
k = 10, with no filter and with the retrieval section's filter (10 % of the rows). Both embedded
engines answer a filtered search slowly (Python over every row), so the filtered runs of all
three take the first ``FILTERED_QUERIES`` queries.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scripts import cranfield
from scripts.bench_env import load_average, utc_now
from scripts.bench_retrieval import (
    CUTOFF,
    FILTER,
    FILTER_GROUPS,
    QUALITY_COLLECTION,
    QUALITY_TENANT,
    SCALE_ROWS,
    base_chunks,
    embed_queries,
    ensure_scale,
    exact_top,
    group_of,
    ingest_cranfield,
    noise_kind,
    scale_marker,
)
from scripts.bench_setup import BENCH_TENANT, ensure_tenant, log

VECTORSTORE, MILVUS, QDRANT = "vectorstore", "milvus", "qdrant"
ENGINES = {
    VECTORSTORE: "pgvector HNSW (PostgreSQL)",
    MILVUS: "Milvus Lite (milvus-lite 3.2.2, in process)",
    QDRANT: "Qdrant local mode (qdrant-client 1.20.0, in process)",
}
MILVUS_FILE = "cranfield-100k.db"
QDRANT_DIRECTORY = "cranfield-100k"
COLLECTION = "scale"
INSERT_BATCH = 2000
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64  # the pgvector index's own (bench_retrieval.HNSW_FALLBACK)
FILTERED_QUERIES = 25
WARMUP_QUERIES = 5
SEARCH_SECONDS = 600.0


@dataclass
class EngineRun:
    backend: str
    label: str  # "plain" or "filtered (10 % of rows)"
    latencies_ms: list[float]
    recall_at_10: float
    returned: float  # mean hits per query (k = 10)

    @property
    def queries(self) -> int:
        return len(self.latencies_ms)


@dataclass(frozen=True)
class Build:
    backend: str
    reused: bool
    load_s: float  # insert / upsert (0 when reused)
    ready_s: float  # index built and loaded (Milvus) or directory reopened (Qdrant)


@dataclass
class BackendsResults:
    date: str
    rows: int
    queries: int
    noise: str
    builds: list[Build]
    runs: list[EngineRun]
    quick: bool
    load_average: str = ""
    runtime_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def run(self, backend: str, label: str) -> EngineRun | None:
        return next((r for r in self.runs if r.backend == backend and r.label == label), None)


# The data --------------------------------------------------------------------------------------


def cranfield_collection(data: cranfield.Cranfield) -> Any:
    """The retrieval section's Cranfield collection, ingested when it is missing or incomplete."""
    from django_tenants.utils import schema_context

    from sources.models import Collection, IngestionJob

    with schema_context(QUALITY_TENANT):
        collection = Collection.objects.filter(name=QUALITY_COLLECTION).first()
        done = (
            collection is not None
            and IngestionJob.objects.filter(collection=collection, status="done").exists()
            and collection.documents.count() == len(data.documents)
        )
    if done:
        log(f"backends: reusing collection {QUALITY_COLLECTION!r}")
        return collection
    log(f"backends: ingesting {len(data.documents)} Cranfield documents …")
    return ingest_cranfield(data)[0]


def entity(row: int, texts: list[tuple[str, str]]) -> tuple[str, str, dict[str, Any]]:
    title, text = texts[row % len(texts)]
    return text, title, {"group": group_of(row), "row": row, "title": title}


def marker_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.marker.json"


def marker_matches(directory: Path, name: str, marker: str, rows: int) -> bool:
    path = marker_path(directory, name)
    if not path.exists():
        return False
    written = json.loads(path.read_text())
    return written.get("marker") == marker and written.get("rows") == rows


def write_marker(directory: Path, name: str, marker: str, rows: int) -> None:
    marker_path(directory, name).write_text(json.dumps({"marker": marker, "rows": rows}))


# Milvus Lite -----------------------------------------------------------------------------------


def milvus_config() -> Any:
    from sources.rag.vector_configs import MilvusConfig

    return MilvusConfig(
        collection=COLLECTION, uri=MILVUS_FILE, metadata_field="metadata", content_field="content"
    )


def build_milvus(
    directory: Path, vectors: np.ndarray, texts: list[tuple[str, str]], marker: str
) -> Build:
    import shutil

    from pymilvus import DataType, MilvusClient

    path = directory / MILVUS_FILE
    rows = len(vectors)
    if marker_matches(directory, MILVUS_FILE, marker, rows):
        started = time.perf_counter()
        client = MilvusClient(uri=str(path))
        if client.has_collection(COLLECTION):
            client.load_collection(COLLECTION)
            count = client.get_collection_stats(COLLECTION).get("row_count")
            if int(count or 0) == rows:
                log(f"backends: reusing the Milvus Lite file ({rows} rows)")
                client.close()
                return Build(MILVUS, True, 0.0, time.perf_counter() - started)
        client.close()
    from sources.rag import milvus

    milvus.forget_connections()
    shutil.rmtree(path, ignore_errors=True)
    marker_path(directory, MILVUS_FILE).unlink(missing_ok=True)
    log(f"backends: inserting {rows} rows into Milvus Lite …")
    client = MilvusClient(uri=str(path))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=vectors.shape[1])
    schema.add_field("content", DataType.VARCHAR, max_length=65_535)
    schema.add_field("metadata", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index(
        field_name="vector",
        index_type="HNSW",
        metric_type="COSINE",
        params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
    )
    client.create_collection(COLLECTION, schema=schema, index_params=index)
    started = time.perf_counter()
    for start in range(0, rows, INSERT_BATCH):
        batch = []
        for row in range(start, min(rows, start + INSERT_BATCH)):
            text, _, metadata = entity(row, texts)
            batch.append(
                {
                    "id": str(row),
                    "vector": vectors[row].tolist(),
                    "content": text,
                    "metadata": metadata,
                }
            )
        client.insert(COLLECTION, batch)
    client.flush(COLLECTION)
    load_s = time.perf_counter() - started
    log(f"backends: Milvus Lite insert {load_s:.0f} s; building the index (load) …")
    started = time.perf_counter()
    client.release_collection(COLLECTION)
    client.load_collection(COLLECTION)
    ready_s = time.perf_counter() - started
    client.close()  # the backend searches through its own connection
    write_marker(directory, MILVUS_FILE, marker, rows)
    return Build(MILVUS, False, load_s, ready_s)


# Qdrant local mode -----------------------------------------------------------------------------


def qdrant_config() -> Any:
    from sources.rag.vector_configs import QdrantConfig

    return QdrantConfig(
        collection=COLLECTION,
        url=QDRANT_DIRECTORY,
        metadata_field="metadata",
        content_field="content",
    )


def build_qdrant(
    directory: Path, vectors: np.ndarray, texts: list[tuple[str, str]], marker: str
) -> Build:
    import shutil

    from qdrant_client import QdrantClient, models

    from sources.rag import qdrant

    path = directory / QDRANT_DIRECTORY
    rows = len(vectors)
    qdrant.forget_connections()  # the local mode lets one client hold the directory
    reused = marker_matches(directory, QDRANT_DIRECTORY, marker, rows)
    load_s = 0.0
    if not reused:
        shutil.rmtree(path, ignore_errors=True)
        marker_path(directory, QDRANT_DIRECTORY).unlink(missing_ok=True)
        log(f"backends: upserting {rows} points into Qdrant's local mode …")
        client = QdrantClient(path=str(path))
        client.create_collection(
            COLLECTION,
            vectors_config=models.VectorParams(
                size=vectors.shape[1], distance=models.Distance.COSINE
            ),
        )
        started = time.perf_counter()
        for start in range(0, rows, INSERT_BATCH):
            ids = list(range(start, min(rows, start + INSERT_BATCH)))
            payloads = []
            for row in ids:
                text, _, metadata = entity(row, texts)
                payloads.append({"content": text, "metadata": metadata})
            client.upsert(
                COLLECTION,
                points=models.Batch(
                    ids=ids, vectors=vectors[ids[0] : ids[-1] + 1].tolist(), payloads=payloads
                ),
                wait=True,
            )
        load_s = time.perf_counter() - started
        client.close()
        write_marker(directory, QDRANT_DIRECTORY, marker, rows)
    else:
        log(f"backends: reusing the Qdrant local directory ({rows} points)")
    started = time.perf_counter()
    backend = qdrant.QdrantBackend(qdrant_config())
    target = backend.target(BENCH_TENANT)
    qdrant.CLIENTS.get(qdrant.connection_key(target), lambda: qdrant.open_client(target, 60.0))
    return Build(QDRANT, reused, load_s, time.perf_counter() - started)


# Measuring -------------------------------------------------------------------------------------


def recall_of(found: list[list[int]], exact: list[list[int]]) -> float:
    return float(
        np.mean(
            [len(set(got) & set(want)) / CUTOFF for got, want in zip(found, exact, strict=True)]
        )
    )


def measure_vectorstore(
    collection_id: int, queries: list[list[float]], exact: list[list[int]], wanted: Any, label: str
) -> EngineRun:
    from django_tenants.utils import schema_context

    from sources.recall import nearest_chunks

    latencies, found = [], []
    with schema_context(BENCH_TENANT):
        for vector in queries[:WARMUP_QUERIES]:
            nearest_chunks([collection_id], vector, CUTOFF, wanted)
        for vector in queries:
            started = time.perf_counter()
            rows = nearest_chunks([collection_id], vector, CUTOFF, wanted)
            latencies.append((time.perf_counter() - started) * 1000)
            found.append([int(row["metadata"]["row"]) for row, _ in rows])
    return EngineRun(
        VECTORSTORE,
        label,
        latencies,
        recall_of(found, exact),
        float(np.mean([len(f) for f in found])),
    )


def measure_engine(
    name: str,
    backend: Any,
    queries: list[list[float]],
    exact: list[list[int]],
    wanted: Any,
    label: str,
) -> EngineRun:
    from sources.rag.vector_backends import Search

    def search(vector: list[float]) -> list[Any]:
        request = Search(
            vector=vector,
            top_k=CUTOFF,
            min_similarity=None,
            wanted=wanted,
            schema=BENCH_TENANT,
            allowlist=(),
        )
        return backend.search(request, SEARCH_SECONDS)

    for vector in queries[:WARMUP_QUERIES]:
        search(vector)
    latencies, found = [], []
    for vector in queries:
        started = time.perf_counter()
        hits = search(vector)
        latencies.append((time.perf_counter() - started) * 1000)
        found.append([int(hit.metadata["row"]) for hit in hits])
    return EngineRun(
        name, label, latencies, recall_of(found, exact), float(np.mean([len(f) for f in found]))
    )


def run_backends(quick: bool) -> BackendsResults:
    from django.conf import settings

    from sources.embedding import get_embedder
    from sources.rag.milvus import MilvusBackend
    from sources.rag.qdrant import QdrantBackend
    from sources.rag.vector_backends import tenant_directory

    started = time.perf_counter()
    ensure_tenant(BENCH_TENANT)
    ensure_tenant(QUALITY_TENANT)
    data = cranfield.load()
    collection = cranfield_collection(data)
    query_matrix, _, _ = embed_queries([query.text for query in data.queries], rounds=1)
    queries = [vector.tolist() for vector in query_matrix]
    rows = 20_000 if quick else SCALE_ROWS
    noise = noise_kind()
    base, texts = base_chunks(collection)
    scale, vectors, _ = ensure_scale(base, texts, rows, get_embedder().identity, noise)
    marker = scale_marker(base, rows, noise)
    directory = tenant_directory(BENCH_TENANT)
    log(
        f"backends: local vector files in {directory} (VECTOR_LOCAL_ROOT {settings.VECTOR_LOCAL_ROOT})"
    )
    builds = [
        build_milvus(directory, vectors, texts, marker),
        build_qdrant(directory, vectors, texts, marker),
    ]
    everything = np.arange(len(vectors))
    in_group = everything[everything % FILTER_GROUPS == int(FILTER["group"][1:])]
    filtered_count = 10 if quick else FILTERED_QUERIES
    backends = {MILVUS: MilvusBackend(milvus_config()), QDRANT: QdrantBackend(qdrant_config())}
    runs: list[EngineRun] = []
    for wanted, allowed, subset in (
        (None, everything, queries),
        (FILTER, in_group, queries[:filtered_count]),
    ):
        label = "filtered (10 % of rows)" if wanted else "plain"
        exact = exact_top(vectors, np.asarray(subset, dtype=np.float32), allowed)
        log(f"backends: vectorstore, {label}, {len(subset)} queries …")
        runs.append(measure_vectorstore(scale.pk, subset, exact, wanted, label))
        for name, backend in backends.items():
            log(f"backends: {name}, {label}, {len(subset)} queries …")
            runs.append(measure_engine(name, backend, subset, exact, wanted, label))
    results = BackendsResults(
        date=utc_now(),
        rows=rows,
        queries=len(queries),
        noise=noise,
        builds=builds,
        runs=runs,
        quick=quick,
        load_average=load_average(),
    )
    results.runtime_s = time.perf_counter() - started
    from sources.rag import milvus, qdrant

    milvus.forget_connections()  # closed now, not by the interpreter's exit
    qdrant.forget_connections()
    return results
