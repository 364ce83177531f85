"""``make bench`` section 4: retrieval quality on Cranfield, and recall speed over 100,000 chunks.

Quality: the 1,400 Cranfield abstracts are ingested into collection ``bench-cranfield`` of tenant
``bench`` through the real path (``submit_documents`` + ``run_ingestion_job``), then every one of
the 225 queries runs through ``sources.recall.recall`` (and ``sources.matching.judge_and_keep``
where a judge is configured, on the collection's judge calibration that the ingestion job
measured). Next to it, ``bm25s`` is called straight on the same texts (no database). The targets
are on what the default blocks *keep* (at most 6 documents): documents kept per query ≥ 3, and
nDCG@6 of the kept documents ≥ 1.05 x bm25s's top 6 (the default block) and ≥ 1.10 x (hybrid
recall with the default judge); nDCG@10 of the ranked lists is reported beside them.

Speed: ingestion chunks/s (the ingest above) beside the embedder's own on the same chunks (target:
≥ 0.8 x), query embedding ms, and ``nearest_chunks`` (HNSW) over 100,000 chunks, plain and with a
metadata filter matching 10 % of the rows, with recall@10 against an exact scan. The 100k
collection is the Cranfield chunk vectors replicated with gaussian noise, loaded with COPY; it is
kept between runs while its marker (in the collection's description) matches.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psutil

from scripts import cranfield
from scripts.bench_env import busy_fraction, load_average, utc_now
from scripts.bench_setup import BENCH_TENANT, ensure_tenant, log

# The Cranfield collection lives in a tenant of its own: it is deleted and ingested again on every
# run, and that churn must not reach the HNSW graph of the 100k collection in BENCH_TENANT.
QUALITY_TENANT = "bench_cranfield"
QUALITY_COLLECTION = "bench-cranfield"
SCALE_COLLECTION = "bench-scale"
SCALE_ROWS = 100_000
CHUNKS_PER_DOCUMENT = 100  # the 100k chunks hang off 1,000 documents
# How the 100k replicas are made from the Cranfield chunk vectors (BENCH_SCALE_NOISE):
# "shaped" (default): original + noise drawn from the covariance of the Cranfield vectors
#   themselves (N(0, NOISE_SCALE² · Σ)), re-normalised: replicas stay on the data's own
#   low-dimensional spread, about as far from their original as real chunks are from their
#   nearest real neighbour.
# "isotropic": original + N(0, ISOTROPIC_SIGMA² · I) in all 384 dimensions, re-normalised.
NOISE_KINDS = ("shaped", "isotropic")
NOISE_SCALE = 1.0
ISOTROPIC_SIGMA = 0.02  # noise norm ~0.39: a replica's cosine to its original ~0.93
NOISE_SEED = 20_261_130
EF_SEARCH_SWEEP = (40, 100, 200)  # plus whatever nearest_chunks sets
PGVECTOR_DEFAULT_EF_SEARCH = 40
FILTER_GROUPS = 10
FILTER = {"group": "g3"}  # one group of FILTER_GROUPS: 10 % of the rows
RECALL_POOL = 20  # chunks each configuration recalls (the default match block's recall top_k)
CUTOFF = 10
KEEP = 6  # the seed's default judge keeps at most 6: the kept figures compare six with six
TARGET_KEPT_RATIO = 1.05  # the default block's kept nDCG vs bm25s's top 6
TARGET_HYBRID_KEPT_RATIO = 1.10  # hybrid recall with the default judge, the same way
TARGET_KEPT_PER_QUERY = 3.0
# What the default route keeps (at most KEEP documents), nDCG@CUTOFF, against bm25s's top CUTOFF;
# and never below the recall order's own first KEEP scored the same way.
TARGET_KEEP_RATIO = 1.20
# A judge scoring a held candidate below this is confident it does not answer (the bench's
# ``hold_min_score`` row).
CONFIDENT_IRRELEVANT = 0.2
HELD = 3  # the bench's hold_recall row: the recall's first three keep their places
TARGET_RATIO = 1.10
TARGET_P99_MS = 10.0
TARGET_RECALL = 0.95
# Ingestion end to end against the embedder alone on the same chunk texts (issue 15).
TARGET_INGEST_RATIO = 0.8
SQL_EXACT_CHECKS = 10
HNSW_INDEX = "chunk_embedding_hnsw"
HNSW_FALLBACK = (
    f"CREATE INDEX {HNSW_INDEX} ON sources_chunk USING hnsw (embedding vector_cosine_ops) "
    "WITH (m='16', ef_construction='64')"
)
SWEEP_MIN_SCORES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
SWEEP_TOP_KS = (6, 10)


# Metrics -----------------------------------------------------------------------------------------


def graded_gain(code: int) -> float:
    """Cleverdon's scale (cranqrel.readme): 1 = complete answer ... 4 = minimum interest."""
    return float(5 - code)


def reversed_gain(code: int) -> float:
    """The other reading of the disputed scale (ir_datasets): 4 = most relevant."""
    return float(code)


def binary_gain(code: int) -> float:
    return 1.0


def ndcg_at(
    ranked: Sequence[int],
    judged: dict[int, int],
    gain: Callable[[int], float],
    cutoff: int = CUTOFF,
) -> float:
    dcg = sum(
        gain(judged[doc]) / math.log2(rank + 2)
        for rank, doc in enumerate(ranked[:cutoff])
        if doc in judged
    )
    ideal_gains = sorted((gain(code) for code in judged.values()), reverse=True)[:cutoff]
    ideal = sum(value / math.log2(rank + 2) for rank, value in enumerate(ideal_gains))
    return dcg / ideal if ideal else 0.0


def recall_at(ranked: Sequence[int], relevant: set[int] | dict[int, int]) -> float:
    return len(set(ranked[:CUTOFF]) & set(relevant)) / len(relevant) if relevant else 0.0


@dataclass
class Quality:
    """One configuration's ranked documents per query, and the metrics over them."""

    name: str
    description: str
    ranked: dict[int, list[int]]  # query id -> document ids, best first, at most CUTOFF
    ndcg: float = 0.0  # graded (Cleverdon gains), the figure the target uses
    ndcg_binary: float = 0.0
    ndcg_reversed: float = 0.0
    recall: float = 0.0
    returned: float = 0.0  # mean documents returned per query
    per_query: list[float] = field(default_factory=list)

    def ratio(self, baseline: Quality) -> float:
        return self.ndcg / baseline.ndcg if baseline.ndcg else float("nan")


def evaluate(quality: Quality, qrels: dict[int, dict[int, int]]) -> Quality:
    queries = sorted(qrels)
    quality.per_query = [ndcg_at(quality.ranked.get(q, []), qrels[q], graded_gain) for q in queries]
    quality.ndcg = float(np.mean(quality.per_query))
    quality.ndcg_binary = float(
        np.mean([ndcg_at(quality.ranked.get(q, []), qrels[q], binary_gain) for q in queries])
    )
    quality.ndcg_reversed = float(
        np.mean([ndcg_at(quality.ranked.get(q, []), qrels[q], reversed_gain) for q in queries])
    )
    quality.recall = float(
        np.mean([recall_at(quality.ranked.get(q, []), qrels[q]) for q in queries])
    )
    quality.returned = float(np.mean([len(quality.ranked.get(q, [])) for q in queries]))
    return quality


@dataclass
class Kept:
    """What a match block *keeps* per query (at most KEEP documents), judged as kept: nDCG@KEEP of
    the kept list (a query keeping nothing scores 0), how many it keeps, their precision."""

    name: str
    description: str
    kept: dict[int, list[int]]  # query id -> kept document ids, in the block's order
    ndcg: float = 0.0
    per_query: float = 0.0  # documents kept per query, over queries with relevant documents
    precision: float = 0.0  # judged-relevant share of what is kept, over queries keeping any
    empty: int = 0  # queries keeping nothing

    def ratio(self, baseline: Kept) -> float:
        return self.ndcg / baseline.ndcg if baseline.ndcg else float("nan")


def evaluate_kept(kept: Kept, qrels: dict[int, dict[int, int]]) -> Kept:
    queries = [query for query in sorted(qrels) if qrels[query]]
    lists = [kept.kept.get(query, [])[:KEEP] for query in queries]
    pairs = list(zip(queries, lists, strict=True))
    kept.ndcg = float(np.mean([ndcg_at(docs, qrels[q], graded_gain, KEEP) for q, docs in pairs]))
    kept.per_query = float(np.mean([len(docs) for docs in lists]))
    shares = [sum(doc in qrels[q] for doc in docs) / len(docs) for q, docs in pairs if docs]
    kept.precision = float(np.mean(shares)) if shares else 0.0
    kept.empty = sum(not docs for docs in lists)
    return kept


# CPU accounting: how busy the machine was while something was measured -------------------------


@dataclass(frozen=True)
class CpuUse:
    wall_s: float
    process_cpu_s: float  # this process, every thread (onnxruntime's included)
    machine_busy: float  # fraction of all cores busy, whatever process

    @property
    def process_cores(self) -> float:
        return self.process_cpu_s / self.wall_s if self.wall_s else 0.0

    @property
    def other_cores(self) -> float:
        """Busy cores outside this process: PostgreSQL serving it, and anything else running."""
        busy = self.machine_busy * (os.cpu_count() or 1)
        return max(busy - self.process_cores, 0.0)

    def describe(self) -> str:
        return (
            f"machine {self.machine_busy:.0%} busy; this process {self.process_cores:.2f} cores, "
            f"other processes (PostgreSQL included) {self.other_cores:.2f} cores"
        )


class CpuMeter:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.process = time.process_time()
        self.machine = psutil.cpu_times()

    def stop(self) -> CpuUse:
        return CpuUse(
            wall_s=time.perf_counter() - self.wall,
            process_cpu_s=time.process_time() - self.process,
            machine_busy=busy_fraction(self.machine, psutil.cpu_times()),
        )


# Results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    documents: int
    chunks: int
    seconds: float
    embed_seconds: float  # of which inside the embedder
    status: str
    cleanup_seconds: float  # before the clock: the previous run's collection deleted, VACUUM
    cpu: CpuUse
    # The embedder alone, right after, on the same chunk texts in one call: its own chunks/s.
    embedder_chunks: int = 0
    embedder_cpu: CpuUse | None = None

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0

    @property
    def embedder_chunks_per_s(self) -> float:
        wall = self.embedder_cpu.wall_s if self.embedder_cpu else 0.0
        return self.embedder_chunks / wall if wall else 0.0

    @property
    def ratio(self) -> float:
        """End-to-end chunks/s over the embedder's own (target ≥ TARGET_INGEST_RATIO)."""
        alone = self.embedder_chunks_per_s
        return self.chunks_per_s / alone if alone else 0.0


@dataclass(frozen=True)
class SweepPoint:
    judge_top_k: int
    min_score: float
    ndcg: float
    kept: float  # mean documents kept per query


@dataclass(frozen=True)
class RecallRow:
    """One recall, its own order beside what the default judge block keeps of it. nDCG is over
    all queries with graded gains; the kept lists hold at most KEEP documents."""

    name: str
    description: str
    recall_ndcg: float  # the recall order's first CUTOFF documents, nDCG@CUTOFF
    recall_top_ndcg: float  # its first KEEP documents, nDCG@KEEP
    recall_top_ndcg_at_cutoff: float  # its first KEEP documents, nDCG@CUTOFF
    kept_ndcg: float  # what the default judge block (order: fused) keeps, nDCG@CUTOFF
    kept_ndcg_at_keep: float  # the same, nDCG@KEEP
    kept_per_query: float
    judge_order_ndcg: float  # the judge's order alone (order: judge, the earlier default)
    held_ndcg: float  # the default block with hold_recall HELD
    held_low_ndcg: float  # ... and hold_min_score CONFIDENT_IRRELEVANT
    held_low_per_query: float


@dataclass(frozen=True)
class ScaleInfo:
    rows: int
    table_rows: int  # every chunk of the bench tenant: the HNSW index covers them all
    reused: bool
    noise: str
    copy_cosine: float  # mean cosine of a replica to the Cranfield vector it copies
    neighbour_cosine: float  # median cosine of a Cranfield chunk to its nearest other chunk
    generate_s: float = 0.0
    clear_s: float = 0.0  # drop the index, delete the old collection, VACUUM
    copy_s: float = 0.0
    index_s: float = 0.0
    vacuum_s: float = 0.0  # VACUUM ANALYZE after the load


@dataclass(frozen=True)
class EfPoint:
    ef_search: int
    recall_at_10: float
    p50_ms: float
    p99_ms: float
    plan: str


@dataclass
class SearchResult:
    label: str
    wanted: dict[str, Any] | None
    latencies_ms: list[float]
    recall_at_10: float
    returned: float  # mean rows returned per query (k = 10)
    plan: str
    sql_agreement: str  # numpy exact vs SQL exact scan on a few queries
    ef_search: int  # what nearest_chunks set
    cpu: CpuUse  # over the timed rounds
    ef_sweep: list[EfPoint] = field(default_factory=list)


@dataclass
class RetrievalResults:
    date: str
    queries: int
    judged_pairs: int
    chunks: int
    ingest: IngestResult
    query_embed_ms: list[float]
    query_embed_cpu: CpuUse
    configs: list[Quality]
    baseline: Quality
    default: Quality
    sweep: list[SweepPoint]
    scale: ScaleInfo
    searches: list[SearchResult]
    quality_plan: str
    load_average: str
    quick: bool
    runtime_s: float = 0.0
    # bm25s top 6, the recall order, the default block, hybrid with the default judge
    kept: list[Kept] = field(default_factory=list)
    # Each recall (BM25, dense, hybrid) alone and under the default judge block, in the same run
    recalls: list[RecallRow] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)  # the collection's, as measured

    def meeting_target(self) -> list[str]:
        goal = TARGET_RATIO * self.baseline.ndcg
        names = [q.name for q in self.configs if q.ndcg >= goal]
        names += [
            f"default recall + judge top_k {p.judge_top_k}, min_score {p.min_score:g}"
            for p in self.sweep
            if p.ndcg >= goal
        ]
        return names


# Embedding with a stopwatch ----------------------------------------------------------------------


class TimedEmbedder:
    """The process's embedder, unchanged, with the time spent inside ``embed`` added up."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.dimensions = inner.dimensions
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def embed_queries(texts: list[str], rounds: int) -> tuple[np.ndarray, list[float], CpuUse]:
    """Each query through ``get_embedder().embed_query``, timed one by one, ``rounds`` times."""
    from sources.embedding import get_embedder

    embedder = get_embedder()
    embedder.embed_query("warm-up: load the model before the clock starts")
    samples: list[float] = []
    vectors: list[list[float]] = []
    meter = CpuMeter()
    for round_index in range(rounds):
        for text in texts:
            started = time.perf_counter()
            vector = embedder.embed_query(text)
            samples.append((time.perf_counter() - started) * 1000)
            if round_index == 0:
                vectors.append(vector)
    return np.asarray(vectors, dtype=np.float32), samples, meter.stop()


# Quality: ingest Cranfield -----------------------------------------------------------------------


def split_title(document: cranfield.Document) -> tuple[str, str]:
    """(title, body): the abstracts repeat their title at the start of the text; drop it there, so
    that the chunk text the platform indexes (``title\\ntext``) holds the title once."""
    title, text = document.title, document.text
    if title and text.startswith(title):
        text = text[len(title) :].strip()
    return title, text


def corpus_text(document: cranfield.Document) -> str:
    """The text of a document as the platform indexes its first chunk, for the bm25s baseline."""
    title, body = split_title(document)
    return f"{title}\n{body}" if title else body


def ingest_cranfield(data: cranfield.Cranfield) -> tuple[Any, IngestResult]:
    """A fresh ``bench-cranfield`` collection filled through submit_documents + run_ingestion_job."""
    from django_tenants.utils import schema_context

    from sources.embedding import get_embedder
    from sources.ingestion import (
        DocumentInput,
        create_collection,
        run_ingestion_job,
        submit_documents,
    )
    from sources.models import Collection

    inputs = []
    for document in data.documents:
        title, body = split_title(document)
        inputs.append(DocumentInput(id=str(document.id), title=title, text=body, metadata={}))
    embedder = TimedEmbedder(get_embedder())
    embedder.embed_query("warm-up")
    embedder.seconds = 0.0
    with schema_context(QUALITY_TENANT):
        Collection.objects.filter(name=QUALITY_COLLECTION).delete()
    cleanup_s = vacuum_chunks(QUALITY_TENANT, analyze=False)  # before the clock
    with schema_context(QUALITY_TENANT):
        collection = create_collection(name=QUALITY_COLLECTION, description="make bench: Cranfield")
        meter = CpuMeter()
        job = submit_documents(collection=collection, documents=inputs)
        job = run_ingestion_job(job.id, embedder)  # type: ignore[arg-type]
        cpu = meter.stop()
        collection.refresh_from_db()
    if job.status != "done":
        raise RuntimeError(f"Cranfield ingestion failed: {job.error}")
    texts, embedder_cpu = embedder_alone(collection)
    return collection, IngestResult(
        documents=job.processed,
        chunks=job.chunks_written,
        seconds=cpu.wall_s,
        embed_seconds=embedder.seconds,
        status=job.status,
        cleanup_seconds=cleanup_s,
        cpu=cpu,
        embedder_chunks=texts,
        embedder_cpu=embedder_cpu,
    )


def embedder_alone(collection: Any) -> tuple[int, CpuUse]:
    """The embedder's own speed on the chunks the ingest just wrote (their texts as the job gave
    them to it, title line first), in one ``embed`` call: no chunking, no database."""
    from django_tenants.utils import schema_context

    from sources.embedding import get_embedder
    from sources.models import Chunk

    with schema_context(QUALITY_TENANT):
        rows = Chunk.objects.filter(collection=collection).values_list("title", "text")
        texts = [f"{title}\n{text}" if title else text for title, text in rows]
    meter = CpuMeter()
    get_embedder().embed(texts)
    return len(texts), meter.stop()


# Quality: the configurations ---------------------------------------------------------------------


def document_ids(hits: Sequence[Any]) -> list[int]:
    """Chunks to documents: first occurrence wins, cut at CUTOFF."""
    seen: list[int] = []
    for hit in hits:
        doc = int(hit.document_id)
        if doc not in seen:
            seen.append(doc)
        if len(seen) == CUTOFF:
            break
    return seen


@dataclass(frozen=True)
class RecallSpec:
    method: str
    top_k: int = RECALL_POOL
    min_similarity: float = -1.0  # no cut: the method's own ranking
    hybrid_mode: str = "weighted"
    lexical_features: bool = False


@dataclass(frozen=True)
class ConfigSpec:
    name: str
    description: str
    recall: RecallSpec
    judge: Any = None  # a sources.matching.JudgeConfig, or None


class QualityRunner:
    """Runs configurations over every query of the benchmark, in the bench tenant."""

    def __init__(self, collection: Any, data: cranfield.Cranfield, vectors: np.ndarray) -> None:
        from django_tenants.utils import schema_context

        from sources.calibration import calibration_of

        with schema_context(QUALITY_TENANT):
            collection.refresh_from_db()  # the ingestion job stored its judge calibration
        self.collection = collection
        # As a rag source's vectorstore backend passes it: what the judge's scores mean here.
        self.calibration = calibration_of(collection)
        self.queries = data.queries
        self.vectors = [vector.tolist() for vector in vectors]
        self.loop = asyncio.new_event_loop()

    def close(self) -> None:
        self.loop.close()

    def hits(self, spec: RecallSpec, index: int) -> list[Any]:
        from sources.recall import recall

        return recall(
            schema=QUALITY_TENANT,
            collections=[self.collection],
            query=self.queries[index].text,
            method=spec.method,  # type: ignore[arg-type]
            top_k=spec.top_k,
            min_similarity=spec.min_similarity,
            query_vector=self.vectors[index],
            hybrid_mode=spec.hybrid_mode,  # type: ignore[arg-type]
            lexical_features=spec.lexical_features,
        )

    def judge(self, index: int, hits: list[Any], judge: Any) -> list[Any]:
        """The decisions ``judge_and_keep`` keeps, in its order, within the character cap."""
        from sources.matching import cap_characters, judge_and_keep

        result = self.loop.run_until_complete(
            judge_and_keep(
                self.queries[index].text,
                hits,
                judge,
                calibrations={self.collection.name: self.calibration},
            )
        )
        cap_characters(result, 10_000)  # a rag source's default max_context_length, in characters
        return result.kept

    def run(self, spec: ConfigSpec) -> Quality:
        from django_tenants.utils import schema_context

        ranked: dict[int, list[int]] = {}
        with schema_context(QUALITY_TENANT):
            for index, query in enumerate(self.queries):
                hits = self.hits(spec.recall, index)
                if spec.judge is not None:
                    hits = [decision.hit for decision in self.judge(index, hits, spec.judge)]
                ranked[query.id] = document_ids(hits)
        return Quality(name=spec.name, description=spec.description, ranked=ranked)

    def kept(self, spec: ConfigSpec) -> Kept:
        """The documents the block keeps per query, at most KEEP."""
        from django_tenants.utils import schema_context

        kept: dict[int, list[int]] = {}
        with schema_context(QUALITY_TENANT):
            for index, query in enumerate(self.queries):
                hits = self.hits(spec.recall, index)
                if spec.judge is not None:
                    hits = [decision.hit for decision in self.judge(index, hits, spec.judge)]
                kept[query.id] = document_ids(hits)[:KEEP]
        return Kept(name=spec.name, description=spec.description, kept=kept)

    def recall_row(self, name: str, description: str, recall: RecallSpec, qrels: Any) -> RecallRow:
        """``recall`` alone, and under the default judge block in each keep order (one recall per
        query, judged three ways)."""
        from django_tenants.utils import schema_context

        from sources.matching import JudgeConfig

        blocks = {
            "fused": JudgeConfig(),
            "judge": JudgeConfig(order="judge"),
            "held": JudgeConfig(hold_recall=HELD),
            "held_low": JudgeConfig(hold_recall=HELD, hold_min_score=CONFIDENT_IRRELEVANT),
        }
        recalled: dict[int, list[int]] = {}
        kept: dict[str, dict[int, list[int]]] = {key: {} for key in blocks}
        with schema_context(QUALITY_TENANT):
            for index, query in enumerate(self.queries):
                hits = self.hits(recall, index)
                recalled[query.id] = document_ids(hits)
                for key, block in blocks.items():
                    decisions = self.judge(index, list(hits), block)
                    kept[key][query.id] = document_ids([d.hit for d in decisions])[:KEEP]
        queries = sorted(qrels)

        def mean(ranked: dict[int, list[int]], cutoff: int, limit: int = CUTOFF) -> float:
            return float(
                np.mean(
                    [
                        ndcg_at(ranked.get(q, [])[:limit], qrels[q], graded_gain, cutoff)
                        for q in queries
                    ]
                )
            )

        def per_query(ranked: dict[int, list[int]]) -> float:
            return float(np.mean([len(ranked.get(q, [])) for q in queries]))

        return RecallRow(
            name=name,
            description=description,
            recall_ndcg=mean(recalled, CUTOFF),
            recall_top_ndcg=mean(recalled, KEEP, KEEP),
            recall_top_ndcg_at_cutoff=mean(recalled, CUTOFF, KEEP),
            kept_ndcg=mean(kept["fused"], CUTOFF),
            kept_ndcg_at_keep=mean(kept["fused"], KEEP),
            kept_per_query=per_query(kept["fused"]),
            judge_order_ndcg=mean(kept["judge"], CUTOFF),
            held_ndcg=mean(kept["held"], CUTOFF),
            held_low_ndcg=mean(kept["held_low"], CUTOFF),
            held_low_per_query=per_query(kept["held_low"]),
        )

    def sweep(self, qrels: dict[int, dict[int, int]]) -> list[SweepPoint]:
        """The default recall with the judge's ``top_k`` and ``min_score`` varied."""
        from django_tenants.utils import schema_context

        from sources.matching import JudgeConfig

        spec = default_spec().recall
        with schema_context(QUALITY_TENANT):
            pools = [self.hits(spec, index) for index in range(len(self.queries))]
        points = []
        for top_k in SWEEP_TOP_KS:
            for min_score in SWEEP_MIN_SCORES:
                judge = JudgeConfig(top_k=top_k, min_score=min_score)
                ranked = {
                    query.id: document_ids(
                        [d.hit for d in self.judge(index, list(pools[index]), judge)]
                    )
                    for index, query in enumerate(self.queries)
                }
                quality = evaluate(Quality("sweep", "", ranked), qrels)
                points.append(SweepPoint(top_k, min_score, quality.ndcg, quality.returned))
        return points


def default_spec() -> ConfigSpec:
    """The default match block (``default_match()``: recall 20 at a similarity of at least the
    embedder's ``rag_min_similarity``, by the method the platform's own collections default to,
    the judge keeps 6 documents scoring at least 0.5), as ``RagSource`` runs it with the local
    judge."""
    from sources.matching import default_match

    match = default_match()
    assert match.recall is not None
    applied = default_recall()
    return ConfigSpec(
        name=f"DEFAULT ({recall_label(applied)} {applied.top_k} @ {applied.min_similarity:g}, "
        "judge keeps 6 @ 0.5)",
        description=f"`default_match()`: {recall_label(applied)} recall top_k {applied.top_k}, "
        f"min_similarity {applied.min_similarity:g} (the embedder's default), "
        "BM25 features for the judge; the local judge keeps at most 6 documents with score "
        "≥ 0.5; max_context_length 10000 characters",
        recall=RecallSpec(
            method=applied.method,
            top_k=applied.top_k,
            min_similarity=applied.min_similarity,
            hybrid_mode=applied.hybrid_mode,
            lexical_features=True,
        ),
        judge=match.judge,
    )


def recall_label(applied: Any) -> str:
    return f"hybrid {applied.hybrid_mode}" if applied.method == "hybrid" else str(applied.method)


def default_recall() -> Any:
    """The default match block's recall as the vectorstore applies it (``AppliedRecall``): the
    values it leaves unwritten are the embedder's defaults and the backend's method."""
    from sources.embedding import get_embedder
    from sources.matching import default_match, rag_recall
    from sources.rag.backends import VectorstoreBackend

    recall = default_match().recall
    assert recall is not None
    return rag_recall(recall, get_embedder(), ranks_both_ways=VectorstoreBackend.ranks_both_ways)


def default_min_similarity() -> float:
    """The default recall's cut as it applies: the embedder's default for an unwritten block."""
    return float(default_recall().min_similarity)


def hybrid_default_spec() -> ConfigSpec:
    """Hybrid recall (weighted) with the default judge block."""
    from sources.matching import JudgeConfig

    judge = JudgeConfig()
    cut = default_min_similarity()
    return ConfigSpec(
        name=f"hybrid weighted @ {cut:g}, judge keeps {judge.top_k} @ {judge.min_score:g}",
        description="hybrid weighted recall (top 20 of 2 x 20 candidates, the same cut), then "
        "the default judge block",
        recall=RecallSpec("hybrid", min_similarity=cut, hybrid_mode="weighted"),
        judge=judge,
    )


def recall_order_spec() -> ConfigSpec:
    """The default recall's own order, cut at KEEP: what the judge starts from."""
    applied = default_recall()
    return ConfigSpec(
        name=f"{recall_label(applied)} top {KEEP} (recall order, no judge)",
        description=f"the default recall's first {KEEP} documents, nothing judged",
        recall=RecallSpec(
            applied.method, min_similarity=applied.min_similarity, hybrid_mode=applied.hybrid_mode
        ),
    )


def recall_specs() -> list[tuple[str, str, RecallSpec]]:
    """The recalls a rag source can run, each as the default match block would (top_k 20, the
    embedder's min_similarity where a cosine exists, BM25 features for the local judge)."""
    cut = default_min_similarity()
    return [
        ("BM25", "`bm25` recall (bm25s), top 20 chunks", RecallSpec("bm25", lexical_features=True)),
        (
            "dense",
            f"`embedding` recall, top 20 chunks at cosine ≥ {cut:g}",
            RecallSpec("embedding", min_similarity=cut, lexical_features=True),
        ),
        (
            "hybrid weighted",
            f"`hybrid` weighted (0.8 · cosine + 0.2 · BM25, min-max) over 2 x 20, cut {cut:g}",
            RecallSpec("hybrid", min_similarity=cut, hybrid_mode="weighted", lexical_features=True),
        ),
        (
            "hybrid rrf (the default)",
            f"`hybrid` reciprocal rank fusion (k = 60) over 2 x 20, cut {cut:g}",
            RecallSpec("hybrid", min_similarity=cut, hybrid_mode="rrf", lexical_features=True),
        ),
    ]


def config_specs() -> list[ConfigSpec]:
    from sources.matching import JudgeConfig

    reranker = JudgeConfig(top_k=CUTOFF, min_score=0.0)
    return [
        ConfigSpec(
            "embedding",
            "HNSW cosine, top 20 chunks, no similarity cut",
            RecallSpec("embedding"),
        ),
        ConfigSpec("bm25", "`sources.lexical` (bm25s), top 20 chunks", RecallSpec("bm25")),
        ConfigSpec(
            "hybrid weighted",
            "0.8 · minmax(cosine) + 0.2 · minmax(BM25) over 2 x 20 candidates",
            RecallSpec("hybrid", hybrid_mode="weighted"),
        ),
        ConfigSpec(
            "hybrid rrf",
            "reciprocal rank fusion (k = 60) over 2 x 20 candidates",
            RecallSpec("hybrid", hybrid_mode="rrf"),
        ),
        ConfigSpec(
            "hybrid weighted + judge",
            "hybrid weighted top 20, then the local judge reranks (top_k 10, min_score 0)",
            RecallSpec("hybrid", hybrid_mode="weighted"),
            reranker,
        ),
        ConfigSpec(
            "embedding 20 @ 0.3 + judge",
            "the default recall, the local judge reranks (top_k 10, min_score 0)",
            RecallSpec("embedding", min_similarity=0.3, lexical_features=True),
            reranker,
        ),
    ]


def bm25s_baseline(data: cranfield.Cranfield) -> Quality:
    """``bm25s.BM25`` called straight on the documents' texts, with the tokenizer settings of
    ``sources.lexical`` (English stop words, PyStemmer English), no database."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    texts = [corpus_text(document) for document in data.documents]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    tokens = bm25s.tokenize(
        [query.text for query in data.queries], stopwords="en", stemmer=stemmer, show_progress=False
    )
    indexes, _ = retriever.retrieve(tokens, k=CUTOFF, show_progress=False)
    ranked = {
        query.id: [data.documents[int(i)].id for i in row]
        for query, row in zip(data.queries, indexes, strict=True)
    }
    return Quality("bm25s (baseline)", "bm25s.BM25 straight on the same texts, no DB", ranked)


# Speed: the 100k collection ----------------------------------------------------------------------


def base_chunks(collection: Any) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """The Cranfield chunk vectors and (title, text), in document and ordinal order."""
    from django_tenants.utils import schema_context

    from sources.models import Chunk

    with schema_context(QUALITY_TENANT):
        rows = list(
            Chunk.objects.filter(collection=collection).values_list(
                "document__external_id", "ordinal", "title", "text", "embedding"
            )
        )
    rows.sort(key=lambda row: (int(row[0]), row[1]))
    vectors = np.asarray([row[4] for row in rows], dtype=np.float32)
    return vectors, [(row[2], row[3]) for row in rows]


def noise_description(noise: str) -> str:
    if noise == "isotropic":
        return f"isotropic sigma={ISOTROPIC_SIGMA}"
    return f"shaped scale={NOISE_SCALE}"


def scale_marker(base: np.ndarray, rows: int, noise: str) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(base).tobytes()).hexdigest()[:16]
    return (
        f"make bench 100k v2: rows={rows} noise={noise_description(noise)} seed={NOISE_SEED} "
        f"groups={FILTER_GROUPS} per_document={CHUNKS_PER_DOCUMENT} base={digest} complete"
    )


def noise_matrix(base: np.ndarray, rows: int, noise: str) -> np.ndarray:
    rng = np.random.default_rng(NOISE_SEED)
    gaussian = rng.standard_normal((rows, base.shape[1]), dtype=np.float32)
    if noise == "isotropic":
        return gaussian * np.float32(ISOTROPIC_SIGMA)
    centered = (base - base.mean(axis=0)).astype(np.float64)
    eigenvalues, eigenvectors = np.linalg.eigh(centered.T @ centered / len(base))
    spread = np.sqrt(np.clip(eigenvalues, 0.0, None)) * NOISE_SCALE
    return (gaussian * spread.astype(np.float32)) @ eigenvectors.T.astype(np.float32)


def replicate(base: np.ndarray, rows: int, noise: str) -> np.ndarray:
    """Row ``i`` is base vector ``i mod len(base)`` plus gaussian noise, re-normalised (float32)."""
    vectors = base[np.arange(rows) % len(base)] + noise_matrix(base, rows, noise)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def neighbour_cosine(base: np.ndarray) -> float:
    """Median cosine of a Cranfield chunk to its nearest other chunk: the data's own spacing."""
    similarities = base @ base.T
    np.fill_diagonal(similarities, -1.0)
    return float(np.median(similarities.max(axis=1)))


def copy_cosine(base: np.ndarray, vectors: np.ndarray) -> float:
    originals = base[np.arange(len(vectors)) % len(base)]
    return float(np.mean(np.einsum("ij,ij->i", originals, vectors)))


def group_of(row: int) -> str:
    return f"g{row % FILTER_GROUPS}"


def cached_scale(marker: str, rows: int) -> Any | None:
    from django.db import connection
    from django_tenants.utils import schema_context

    from sources.models import Chunk, Collection

    with schema_context(BENCH_TENANT):
        collection = Collection.objects.filter(name=SCALE_COLLECTION).first()
        if collection is None or collection.description != marker:
            return None
        if Chunk.objects.filter(collection=collection).count() != rows:
            return None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                [BENCH_TENANT, HNSW_INDEX],
            )
            if cursor.fetchone() is None:
                return None
    return collection


def hnsw_definition(cursor: Any) -> str:
    cursor.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
        [BENCH_TENANT, HNSW_INDEX],
    )
    row = cursor.fetchone()
    return row[0] if row else HNSW_FALLBACK


def vector_text(vector: np.ndarray) -> str:
    return "[" + ",".join(map(repr, vector.tolist())) + "]"


def copy_chunks(
    cursor: Any,
    collection_id: int,
    document_ids: list[int],
    vectors: np.ndarray,
    texts: list[tuple[str, str]],
) -> None:
    """COPY the chunk rows (text format); ``search_vector`` stays NULL (BM25 is not measured)."""
    now = datetime.now(UTC)
    columns = "collection_id, document_id, ordinal, title, text, metadata, embedding, created_at"
    with cursor.copy(f"COPY sources_chunk ({columns}) FROM STDIN") as copy:
        for row, vector in enumerate(vectors):
            title, text = texts[row % len(texts)]
            metadata = {
                "document_id": f"replica-{row // CHUNKS_PER_DOCUMENT}",
                "group": group_of(row),
                "row": row,
            }
            copy.write_row(
                (
                    collection_id,
                    document_ids[row // CHUNKS_PER_DOCUMENT],
                    row,
                    title,
                    text,
                    json.dumps(metadata),
                    vector_text(vector),
                    now,
                )
            )


def create_documents(collection: Any, rows: int) -> list[int]:
    from sources.models import Document

    count = math.ceil(rows / CHUNKS_PER_DOCUMENT)
    documents = Document.objects.bulk_create(
        [
            Document(
                collection=collection,
                external_id=f"replica-{index}",
                title=f"replica {index}",
                text="",
                content_hash="bench",
                indexed_hash="bench",
                status="indexed",
                chunk_count=min(CHUNKS_PER_DOCUMENT, rows - index * CHUNKS_PER_DOCUMENT),
            )
            for index in range(count)
        ],
        batch_size=1000,
    )
    return [document.pk for document in documents]


def clear_scale() -> tuple[str, float]:
    """Drop the tenant's HNSW index, delete the old 100k collection, VACUUM the chunk table.

    Done before the load and in its own transaction: an index built in the transaction that
    deleted rows would still hold those rows (they are only *being* deleted), and vacuuming them
    out of an HNSW graph later takes many minutes. Returns (the index's definition, seconds)."""
    from django.db import connection, transaction
    from django_tenants.utils import schema_context

    from sources.models import Collection

    started = time.perf_counter()
    with schema_context(BENCH_TENANT), transaction.atomic(), connection.cursor() as cursor:
        definition = hnsw_definition(cursor)
        cursor.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
        Collection.objects.filter(name=SCALE_COLLECTION).delete()
    vacuum_chunks(BENCH_TENANT, analyze=False)
    return definition, time.perf_counter() - started


def load_scale(
    definition: str,
    marker: str,
    identity: str,
    vectors: np.ndarray,
    texts: list[tuple[str, str]],
) -> tuple[Any, float, float]:
    """One transaction: the collection, COPY, then the HNSW index over the whole table. Returns
    (collection, copy seconds, index seconds). A failure rolls it back; the next run rebuilds."""
    from django.db import connection, transaction
    from django_tenants.utils import schema_context

    from sources.models import Collection

    with schema_context(BENCH_TENANT), transaction.atomic(), connection.cursor() as cursor:
        collection = Collection.objects.create(
            name=SCALE_COLLECTION, description="loading", embedder=identity
        )
        started = time.perf_counter()
        copy_chunks(
            cursor, collection.pk, create_documents(collection, len(vectors)), vectors, texts
        )
        copy_s = time.perf_counter() - started
        started = time.perf_counter()
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # check the deferred FKs before indexing
        cursor.execute("SET LOCAL maintenance_work_mem = '1GB'")
        cursor.execute(definition)
        index_s = time.perf_counter() - started
        Collection.objects.filter(pk=collection.pk).update(description=marker)
    return collection, copy_s, index_s


def vacuum_chunks(schema: str, *, analyze: bool) -> float:
    """VACUUM the bench tenant's chunk table (autocommit: VACUUM cannot run in a transaction), so
    that no autovacuum of it runs during the measurements."""
    from django.db import connection
    from django_tenants.utils import schema_context

    started = time.perf_counter()
    with schema_context(schema), connection.cursor() as cursor:
        cursor.execute(f"VACUUM {'(ANALYZE) ' if analyze else ''}sources_chunk")
    return time.perf_counter() - started


def table_rows() -> int:
    from django_tenants.utils import schema_context

    from sources.models import Chunk

    with schema_context(BENCH_TENANT):
        return Chunk.objects.count()


def ensure_scale(
    base: np.ndarray, texts: list[tuple[str, str]], rows: int, identity: str, noise: str
) -> tuple[Any, np.ndarray, ScaleInfo]:
    marker = scale_marker(base, rows, noise)
    started = time.perf_counter()
    vectors = replicate(base, rows, noise)
    generate_s = time.perf_counter() - started
    spacing = (noise_description(noise), copy_cosine(base, vectors), neighbour_cosine(base))
    collection = cached_scale(marker, rows)
    if collection is not None:
        log(f"100k: reusing collection {SCALE_COLLECTION!r} ({rows} chunks, marker matches)")
        return collection, vectors, ScaleInfo(rows, table_rows(), True, *spacing)
    log(f"100k: loading {rows} chunks with COPY, then building the HNSW index …")
    definition, clear_s = clear_scale()
    collection, copy_s, index_s = load_scale(definition, marker, identity, vectors, texts)
    vacuum_s = vacuum_chunks(BENCH_TENANT, analyze=True)
    info = ScaleInfo(
        rows, table_rows(), False, *spacing, generate_s, clear_s, copy_s, index_s, vacuum_s
    )
    log(
        f"100k: clear {clear_s:.1f} s, COPY {copy_s:.1f} s, HNSW build {index_s:.1f} s, "
        f"VACUUM ANALYZE {vacuum_s:.1f} s"
    )
    return collection, vectors, info


# Speed: search -----------------------------------------------------------------------------------


def exact_top(vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray) -> list[list[int]]:
    """Brute force: the CUTOFF best rows (by cosine; vectors are unit length) among ``rows``."""
    candidates = vectors[rows]
    result = []
    for query in queries:
        scores = candidates @ query
        best = np.argpartition(-scores, CUTOFF - 1)[:CUTOFF]
        best = best[np.argsort(-scores[best])]
        result.append([int(rows[i]) for i in best])
    return result


def mirror_queryset(collection_id: int, vector: list[float], wanted: dict[str, Any] | None) -> Any:
    """The queryset ``sources.recall.nearest_chunks`` runs, for EXPLAIN and the SQL exact scan."""
    from pgvector.django import CosineDistance

    from sources.models import Chunk
    from sources.recall import CHUNK_FIELDS

    queryset = Chunk.objects.filter(collection_id__in=[collection_id])
    if wanted:
        queryset = queryset.filter(metadata__contains=wanted)
    return (
        queryset.annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values(*CHUNK_FIELDS, "distance")[:CUTOFF]
    )


def search_settings(cursor: Any, ef_search: int) -> None:
    """The session settings ``nearest_chunks`` applies (transaction-local)."""
    cursor.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
    cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef_search)])


def production_ef_search(collection_id: int, vector: list[float]) -> int:
    """The ``hnsw.ef_search`` that ``nearest_chunks`` sets for k = CUTOFF, read off its SQL."""
    from django.db import connection

    from sources.recall import nearest_chunks

    seen: list[int] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "hnsw.ef_search" in sql and params:
            seen.append(int(params[0]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        nearest_chunks([collection_id], vector, CUTOFF, None)
    return seen[-1] if seen else PGVECTOR_DEFAULT_EF_SEARCH


def search_with_ef(
    collection_id: int, vector: list[float], wanted: dict[str, Any] | None, ef_search: int
) -> list[int]:
    """``nearest_chunks``'s query with another ``hnsw.ef_search``: rows (``metadata.row``)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        search_settings(cursor, ef_search)
        rows = list(mirror_queryset(collection_id, vector, wanted))
    return [int(row["metadata"]["row"]) for row in rows]


def ef_sweep(
    collection_id: int,
    vectors: list[list[float]],
    exact: list[list[int]],
    wanted: dict[str, Any] | None,
    production: int,
) -> list[EfPoint]:
    """What the HNSW search gives at other ``hnsw.ef_search`` values (one round each)."""
    points = []
    for ef in sorted({*EF_SEARCH_SWEEP, production}):
        latencies, recalls = [], []
        for vector, want in zip(vectors, exact, strict=True):
            started = time.perf_counter()
            got = search_with_ef(collection_id, vector, wanted, ef)
            latencies.append((time.perf_counter() - started) * 1000)
            recalls.append(len(set(got) & set(want)) / CUTOFF)
        p50, p99 = np.percentile(latencies, [50, 99])
        plan = plan_of(collection_id, vectors[0], wanted, ef)
        points.append(EfPoint(ef, float(np.mean(recalls)), float(p50), float(p99), plan))
    return points


def plan_of(
    collection_id: int,
    vector: list[float],
    wanted: dict[str, Any] | None,
    ef_search: int,
) -> str:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        search_settings(cursor, ef_search)
        plan = mirror_queryset(collection_id, vector, wanted).explain()
    return chunk_access(plan)


def plan_nodes(plan: str) -> list[str]:
    """The nodes of an ``EXPLAIN`` text, outermost first, without their costs."""
    nodes = []
    for position, line in enumerate(plan.splitlines()):
        text = line.strip()
        if position and not text.startswith("->"):
            continue  # a node's details (keys, conditions), not a node
        nodes.append(text.removeprefix("->").strip().split("  (")[0])
    return nodes


def chunk_access(plan: str) -> str:
    """The plan's steps over the chunk table (scans, sorts), e.g. the HNSW index scan."""
    steps = [
        node
        for node in plan_nodes(plan)
        if "sources_chunk" in node or node.startswith(("Sort", "Incremental Sort"))
    ]
    return " → ".join(steps) or plan.splitlines()[0]


def sql_exact_rows(
    collection_id: int, vector: list[float], wanted: dict[str, Any] | None
) -> set[int]:
    """The same query with index scans disabled: PostgreSQL computes every distance."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")  # nor an HNSW scan, then
        rows = list(mirror_queryset(collection_id, vector, wanted))
    return {int(row["metadata"]["row"]) for row in rows}


def measure_search(
    collection_id: int,
    queries: np.ndarray,
    exact: list[list[int]],
    wanted: dict[str, Any] | None,
    rounds: int,
) -> SearchResult:
    from django_tenants.utils import schema_context

    from sources.recall import nearest_chunks

    vectors = [query.tolist() for query in queries]
    latencies: list[float] = []
    found: list[list[int]] = []
    with schema_context(BENCH_TENANT):
        for vector in vectors[:50]:  # warm-up: caches, index pages
            nearest_chunks([collection_id], vector, CUTOFF, wanted)
        meter = CpuMeter()
        for round_index in range(rounds):
            for vector in vectors:
                started = time.perf_counter()
                rows = nearest_chunks([collection_id], vector, CUTOFF, wanted)
                latencies.append((time.perf_counter() - started) * 1000)
                if round_index == 0:
                    found.append([int(row["metadata"]["row"]) for row, _ in rows])
        cpu = meter.stop()
        production = production_ef_search(collection_id, vectors[0])
        plan = plan_of(collection_id, vectors[0], wanted, production)
        sweep = ef_sweep(collection_id, vectors, exact, wanted, production)
        agree = sum(
            sql_exact_rows(collection_id, vectors[i], wanted) == set(exact[i])
            for i in range(min(SQL_EXACT_CHECKS, len(vectors)))
        )
    recall = float(
        np.mean(
            [len(set(got) & set(want)) / CUTOFF for got, want in zip(found, exact, strict=True)]
        )
    )
    checks = min(SQL_EXACT_CHECKS, len(vectors))
    return SearchResult(
        label="filtered (10 % of rows)" if wanted else "plain",
        wanted=wanted,
        latencies_ms=latencies,
        recall_at_10=recall,
        returned=float(np.mean([len(rows) for rows in found])),
        plan=plan,
        sql_agreement=f"{agree} of {checks}",
        ef_search=production,
        cpu=cpu,
        ef_sweep=sweep,
    )


def prepare_scale(
    quality_collection: Any, rows: int, noise: str
) -> tuple[Any, np.ndarray, ScaleInfo]:
    from sources.embedding import get_embedder

    base, texts = base_chunks(quality_collection)
    return ensure_scale(base, texts, rows, get_embedder().identity, noise)


def measure_scale(
    collection: Any, vectors: np.ndarray, query_vectors: np.ndarray, rounds: int
) -> list[SearchResult]:
    everything = np.arange(len(vectors))
    in_group = everything[everything % FILTER_GROUPS == int(FILTER["group"][1:])]
    searches = []
    for wanted, allowed in ((None, everything), (FILTER, in_group)):
        label = "filtered" if wanted else "plain"
        log(f"100k: {label} search, {len(query_vectors)} queries x {rounds} rounds …")
        exact = exact_top(vectors, query_vectors, allowed)
        searches.append(measure_search(collection.pk, query_vectors, exact, wanted, rounds))
    return searches


def quality_plan(collection: Any, vector: np.ndarray) -> str:
    """How PostgreSQL runs the ``embedding`` recall on the Cranfield collection."""
    from django_tenants.utils import schema_context

    with schema_context(QUALITY_TENANT):
        ef = production_ef_search(collection.pk, vector.tolist())
        return plan_of(collection.pk, vector.tolist(), None, ef)


# The section -------------------------------------------------------------------------------------


def run_quality(
    data: cranfield.Cranfield, collection: Any, vectors: np.ndarray
) -> tuple[
    list[Quality], Quality, Quality, list[SweepPoint], list[Kept], dict[str, Any], list[RecallRow]
]:
    runner = QualityRunner(collection, data, vectors)
    baseline = evaluate(bm25s_baseline(data), data.qrels)
    try:
        configs = []
        for spec in config_specs():
            log(f"quality: {spec.name} …")
            configs.append(evaluate(runner.run(spec), data.qrels))
        log("quality: the default match block …")
        default = evaluate(runner.run(default_spec()), data.qrels)
        log("quality: what the default blocks keep …")
        top = {query: docs[:KEEP] for query, docs in baseline.ranked.items()}
        kept = [
            evaluate_kept(
                Kept(f"bm25s top {KEEP} (baseline)", f"bm25s.BM25's first {KEEP}", top),
                data.qrels,
            ),
            *(
                evaluate_kept(runner.kept(spec), data.qrels)
                for spec in (recall_order_spec(), default_spec(), hybrid_default_spec())
            ),
        ]
        log("quality: each recall alone and under the default judge block …")
        recalls = [
            runner.recall_row(name, description, recall, data.qrels)
            for name, description, recall in recall_specs()
        ]
        log("quality: default recall with the judge's top_k and min_score varied …")
        sweep = runner.sweep(data.qrels)
        calibration = runner.calibration.summary()
    finally:
        runner.close()
    return configs, baseline, default, sweep, kept, calibration, recalls


def retire_shared_quality_collection() -> None:
    """Earlier versions ingested Cranfield into BENCH_TENANT, beside the 100k collection."""
    from django_tenants.utils import schema_context

    from sources.models import Collection

    with schema_context(BENCH_TENANT):
        deleted, _ = Collection.objects.filter(name=QUALITY_COLLECTION).delete()
    if deleted:
        log(f"removing {QUALITY_COLLECTION!r} from tenant {BENCH_TENANT!r} (once) …")
        vacuum_chunks(BENCH_TENANT, analyze=True)


def noise_kind() -> str:
    noise = os.environ.get("BENCH_SCALE_NOISE", "").strip() or NOISE_KINDS[0]
    if noise not in NOISE_KINDS:
        raise SystemExit(f"BENCH_SCALE_NOISE={noise!r}: expected one of {NOISE_KINDS}")
    return noise


def run_retrieval(quick: bool) -> RetrievalResults:
    started = time.perf_counter()
    ensure_tenant(QUALITY_TENANT)
    retire_shared_quality_collection()
    data = cranfield.load()
    log(f"retrieval: ingesting {len(data.documents)} Cranfield documents (real ingestion job) …")
    collection, ingest = ingest_cranfield(data)
    log(
        f"retrieval: {ingest.chunks} chunks in {ingest.seconds:.1f} s "
        f"({ingest.chunks_per_s:.1f} chunks/s; the embedder alone {ingest.embedder_chunks_per_s:.1f}"
        f" chunks/s; ratio {ingest.ratio:.2f})"
    )
    vectors, embed_ms, embed_cpu = embed_queries([query.text for query in data.queries], rounds=2)
    # The 100k collection first, so that quality is always measured with it in the table.
    scale_collection, scale_vectors, scale = prepare_scale(
        collection, 20_000 if quick else SCALE_ROWS, noise_kind()
    )
    configs, baseline, default, sweep, kept, calibration, recalls = run_quality(
        data, collection, vectors
    )
    searches = measure_scale(scale_collection, scale_vectors, vectors, rounds=1 if quick else 4)
    results = RetrievalResults(
        date=utc_now(),
        queries=len(data.queries),
        judged_pairs=sum(len(judged) for judged in data.qrels.values()),
        chunks=ingest.chunks,
        ingest=ingest,
        query_embed_ms=embed_ms,
        query_embed_cpu=embed_cpu,
        configs=configs,
        baseline=baseline,
        default=default,
        sweep=sweep,
        kept=kept,
        calibration=calibration,
        recalls=recalls,
        scale=scale,
        searches=searches,
        quality_plan=quality_plan(collection, vectors[0]),
        load_average=load_average(),
        quick=quick,
    )
    results.runtime_s = time.perf_counter() - started
    return results
