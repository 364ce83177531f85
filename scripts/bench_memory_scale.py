"""``make bench`` section 6, part 2: user-scoped memory search over 1,000,000 memories.

The memories are synthetic: 10,000 users with 100 memories each, 384-dimensional unit vectors made
of topic centres plus gaussian noise (each user talks about a few topics of its own), loaded with a
binary ``COPY`` into the ``memory_memory`` table of a tenant of their own. Rows are interleaved
(row ``r`` belongs to user ``r mod 10,000``), as memories written over time are: a user's rows lie on
different pages. The loaded table is kept between runs while its marker (the table's comment) and
its row count match. Search is the production call, ``memory.selectors.search_memories``, timed
one call at a time with precomputed query vectors; the exact answer is a numpy brute force over
that user's rows.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from scripts.bench_env import utc_now
from scripts.bench_retrieval import CpuMeter, CpuUse, plan_nodes
from scripts.bench_setup import log

DIMENSIONS = 384
TOPICS = 2_000  # topic centres shared by all users
TOPICS_PER_USER = 8
SIGMA = 0.05  # per-dimension noise: a memory's cosine to its topic centre is ~0.72
SEED = 20_261_205
CHUNK_ROWS = 50_000  # generated, encoded and sent to COPY at a time
K = 5
EMBEDDER = "bench:synthetic-topics"
HNSW_INDEX = "memory_embedding_hnsw"
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
SPAN_DAYS = 365  # created_at spread over the year before the load
MARKER_VERSION = "make bench memory scale v1"


@dataclass(frozen=True)
class ScaleSize:
    users: int
    per_user: int
    queries: int
    warmup: int

    @property
    def rows(self) -> int:
        return self.users * self.per_user


FULL = ScaleSize(users=10_000, per_user=100, queries=2_000, warmup=200)
QUICK = ScaleSize(users=1_000, per_user=100, queries=300, warmup=50)


# Synthetic vectors -------------------------------------------------------------------------------


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def centres() -> np.ndarray:
    rng = np.random.default_rng([SEED, 1])
    return normalise(rng.standard_normal((TOPICS, DIMENSIONS), dtype=np.float32))


def user_topics(users: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, 2])
    return np.stack([rng.choice(TOPICS, TOPICS_PER_USER, replace=False) for _ in range(users)])


def chunk_vectors(
    index: int, rows: np.ndarray, size: ScaleSize, topic_centres: np.ndarray, topics: np.ndarray
) -> np.ndarray:
    """Rows ``rows`` (one chunk): their user's topic centre plus noise, unit length, float32."""
    rng = np.random.default_rng([SEED, 3, index])
    users = rows % size.users
    picked = topics[users, rng.integers(0, TOPICS_PER_USER, len(rows))]
    noise = rng.standard_normal((len(rows), DIMENSIONS), dtype=np.float32)
    return normalise(topic_centres[picked] + noise * np.float32(SIGMA))


def chunks(size: ScaleSize) -> list[np.ndarray]:
    return [
        np.arange(start, min(start + CHUNK_ROWS, size.rows), dtype=np.int64)
        for start in range(0, size.rows, CHUNK_ROWS)
    ]


def all_vectors(size: ScaleSize) -> np.ndarray:
    """Every row's vector, exactly as loaded (the generator is seeded per chunk)."""
    topic_centres, topics = centres(), user_topics(size.users)
    vectors = np.empty((size.rows, DIMENSIONS), dtype=np.float32)
    for index, rows in enumerate(chunks(size)):
        vectors[rows] = chunk_vectors(index, rows, size, topic_centres, topics)
    return vectors


def query_set(size: ScaleSize) -> tuple[np.ndarray, np.ndarray]:
    """(users, vectors): each query is one of its user's topic centres plus the same noise."""
    rng = np.random.default_rng([SEED, 4])
    topics = user_topics(size.users)
    users = rng.integers(0, size.users, size.queries + size.warmup)
    picked = topics[users, rng.integers(0, TOPICS_PER_USER, len(users))]
    noise = rng.standard_normal((len(users), DIMENSIONS), dtype=np.float32)
    return users, normalise(centres()[picked] + noise * np.float32(SIGMA))


# Binary COPY rows --------------------------------------------------------------------------------
# PostgreSQL's binary COPY format: a header, then per row an int16 field count and, per field, an
# int32 length and the type's binary (send) representation; big-endian. Every row here has the
# same width (fixed-width ids in the texts), so a chunk is one numpy structured array.

COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)
COLUMNS = (
    "id",
    "user_id",
    "content",
    "kind",
    "embedding",
    "embedder",
    "search_vector",
    "metadata",
    "source_request_id",
    "source_turn",
    "strength",
    "created_at",
    "updated_at",
)
CONTENT = ("Synthetic memory m", 7, " of user u", 5, ".")  # text, row digits, text, user digits
# to_tsvector('english', content) in tsvectorsend's format: 5 lexemes, sorted bytewise, each
# NUL-terminated with one position; the row and user digits are patched in.
TSV_HEAD = (5).to_bytes(4, "big") + b"m"
TSV_MID = b"\x00\x00\x01\x00\x03memori\x00\x00\x01\x00\x02synthet\x00\x00\x01\x00\x01u"
TSV_TAIL = b"\x00\x00\x01\x00\x06user\x00\x00\x01\x00\x05"
KIND = b"fact"
METADATA = b"\x01{}"  # jsonb: version 1, then the text


def content_of(row: int, user: int) -> str:
    return f"{CONTENT[0]}{row:07d}{CONTENT[2]}{user:05d}{CONTENT[4]}"


def text_field(name: str, value: bytes) -> list[tuple[str, str]]:
    return [(f"{name}_len", ">i4"), (name, f"S{len(value)}")] if value else [(f"{name}_len", ">i4")]


def row_dtype() -> tuple[np.dtype, int, int]:
    """The row's structured dtype, the content's length and the tsvector's length (bytes)."""
    content_len = sum(len(p) if isinstance(p, str) else p for p in CONTENT)
    tsv_len = len(TSV_HEAD) + 7 + len(TSV_MID) + 5 + len(TSV_TAIL)
    return (
        np.dtype(
            [
                ("fields", ">i2"),
                ("id_len", ">i4"),
                ("id", ">i8"),
                ("user_len", ">i4"),
                ("user_head", "S1"),
                ("user_digits", "S5"),
                ("content_len", ">i4"),
                ("c_head", f"S{len(CONTENT[0])}"),
                ("c_row", "S7"),
                ("c_mid", f"S{len(CONTENT[2])}"),
                ("c_user", "S5"),
                ("c_tail", "S1"),
                *text_field("kind", KIND),
                ("emb_len", ">i4"),
                ("emb_dim", ">i2"),
                ("emb_unused", ">i2"),
                ("emb", ">f4", (DIMENSIONS,)),
                *text_field("embedder", EMBEDDER.encode()),
                ("tsv_len", ">i4"),
                ("tsv_head", f"S{len(TSV_HEAD)}"),
                ("tsv_row", "S7"),
                ("tsv_mid", f"S{len(TSV_MID)}"),
                ("tsv_user", "S5"),
                ("tsv_tail", f"S{len(TSV_TAIL)}"),
                *text_field("metadata", METADATA),
                ("request_len", ">i4"),
                ("turn_len", ">i4"),
                ("strength_len", ">i4"),
                ("strength", ">f8"),
                ("created_len", ">i4"),
                ("created", ">i8"),
                ("updated_len", ">i4"),
                ("updated", ">i8"),
            ]
        ),
        content_len,
        tsv_len,
    )


def digits(values: np.ndarray, width: int) -> np.ndarray:
    """Zero-padded decimal digits of each value as fixed-width bytes (``S{width}``)."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    ascii_digits = ((values[:, None] // powers) % 10 + ord("0")).astype(np.uint8)
    return np.ascontiguousarray(ascii_digits).view(f"S{width}").ravel()


def encode_rows(rows: np.ndarray, vectors: np.ndarray, size: ScaleSize, loaded: datetime) -> bytes:
    """The rows of one chunk in binary COPY format (without the header)."""
    dtype, content_len, tsv_len = row_dtype()
    out = np.zeros(len(rows), dtype=dtype)
    row_digits, user_digits = digits(rows, 7), digits(rows % size.users, 5)
    out["fields"] = len(COLUMNS)
    out["id_len"], out["id"] = 8, rows + 1
    out["user_len"], out["user_head"], out["user_digits"] = 6, b"u", user_digits
    out["content_len"] = content_len
    out["c_head"], out["c_row"], out["c_mid"] = CONTENT[0].encode(), row_digits, CONTENT[2].encode()
    out["c_user"], out["c_tail"] = user_digits, CONTENT[4].encode()
    out["kind_len"], out["kind"] = len(KIND), KIND
    out["emb_len"], out["emb_dim"], out["emb_unused"] = 4 + 4 * DIMENSIONS, DIMENSIONS, 0
    out["emb"] = vectors
    out["embedder_len"], out["embedder"] = len(EMBEDDER), EMBEDDER.encode()
    out["tsv_len"], out["tsv_head"], out["tsv_row"] = tsv_len, TSV_HEAD, row_digits
    out["tsv_mid"], out["tsv_user"], out["tsv_tail"] = TSV_MID, user_digits, TSV_TAIL
    out["metadata_len"], out["metadata"] = len(METADATA), METADATA
    out["request_len"] = out["turn_len"] = 0  # empty strings, not NULL
    out["strength_len"], out["strength"] = 8, 1.0
    start_us = (loaded - timedelta(days=SPAN_DAYS) - PG_EPOCH) // timedelta(microseconds=1)
    stamps = start_us + rows * (SPAN_DAYS * 86_400 * 1_000_000 // size.rows)
    out["created_len"], out["created"] = 8, stamps
    out["updated_len"], out["updated"] = 8, stamps
    return out.tobytes()


# The table ---------------------------------------------------------------------------------------


@dataclass
class LoadInfo:
    rows: int
    users: int
    reused: bool
    hnsw: bool  # the HNSW index exists on the bench table
    marker: str
    table_bytes: int = 0
    generate_s: float = 0.0  # vectors (every run: the exact scan needs them)
    copy_s: float = 0.0  # encode + COPY (load only)
    index_s: float = 0.0  # the btree / GIN indexes rebuilt after the load
    hnsw_s: float = 0.0
    vacuum_s: float = 0.0
    loaded_at: str = ""  # when the table was loaded (this run, or the run that loaded it)
    verified: str = ""

    def timings(self) -> dict[str, Any]:
        return {
            "loaded_at": self.loaded_at,
            "copy_s": round(self.copy_s, 1),
            "index_s": round(self.index_s, 1),
            "hnsw_s": round(self.hnsw_s, 1),
            "vacuum_s": round(self.vacuum_s, 1),
        }

    def recall_timings(self, comment: str) -> None:
        """The load timings the loading run wrote under the marker (the comment's 2nd line)."""
        _, _, details = comment.partition("\n")
        try:
            known = json.loads(details)
        except ValueError:
            return
        self.loaded_at = str(known.get("loaded_at", ""))
        for name in ("copy_s", "index_s", "hnsw_s", "vacuum_s"):
            setattr(self, name, float(known.get(name, 0.0)))


def marker_for(size: ScaleSize, hnsw: bool) -> str:
    return (
        f"{MARKER_VERSION}: rows={size.rows} users={size.users} dims={DIMENSIONS} "
        f"topics={TOPICS}x{TOPICS_PER_USER} sigma={SIGMA} seed={SEED} hnsw={hnsw} complete"
    )


def table_state(schema: str) -> tuple[str | None, int, list[tuple[str, str]]]:
    """(the table's comment, its row count, its secondary indexes as (name, definition))."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT obj_description(to_regclass(%s), 'pg_class')", [f'"{schema}".memory_memory']
        )
        comment = cursor.fetchone()[0]
        cursor.execute(f'SELECT count(*) FROM "{schema}".memory_memory')
        count = cursor.fetchone()[0]
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND tablename = 'memory_memory' AND indexname NOT LIKE %s ORDER BY indexname",
            [schema, "%pkey"],
        )
        indexes = [(name, definition) for name, definition in cursor.fetchall()]
    return comment, count, indexes


def table_bytes(schema: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [f'"{schema}".memory_memory'])
        return int(cursor.fetchone()[0])


def load_table(
    schema: str, size: ScaleSize, indexes: list[tuple[str, str]], hnsw: bool, marker: str
) -> tuple[np.ndarray, float, float, float]:
    """One transaction: drop the secondary indexes, empty the table, COPY every row, rebuild the
    indexes (the HNSW one only with ``hnsw``), set the id sequence and the marker. Returns
    (vectors, COPY seconds, index seconds, HNSW seconds)."""
    from django.db import connection, transaction

    topic_centres, topics = centres(), user_topics(size.users)
    vectors = np.empty((size.rows, DIMENSIONS), dtype=np.float32)
    loaded = datetime.now(UTC)
    table = f'"{schema}".memory_memory'
    with transaction.atomic(), connection.cursor() as cursor:
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX IF EXISTS "{schema}"."{name}"')
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY")
        started = time.perf_counter()
        columns = ", ".join(COLUMNS)
        with cursor.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(COPY_HEADER)
            for index, rows in enumerate(chunks(size)):
                vectors[rows] = chunk_vectors(index, rows, size, topic_centres, topics)
                copy.write(encode_rows(rows, vectors[rows], size, loaded))
                if index % 4 == 3:
                    log(f"memory scale: {int(rows[-1]) + 1:,} rows sent …")
            copy.write(COPY_TRAILER)
        copy_s = time.perf_counter() - started
        cursor.execute("SET LOCAL maintenance_work_mem = '4GB'")
        started = time.perf_counter()
        for name, definition in indexes:
            if name != HNSW_INDEX:
                cursor.execute(definition)
        index_s = time.perf_counter() - started
        hnsw_s = 0.0
        if hnsw:
            definition = dict(indexes).get(HNSW_INDEX)
            if definition is None:
                raise RuntimeError(f"no {HNSW_INDEX} definition to rebuild")
            log("memory scale: building the HNSW index (BENCH_MEMORY_HNSW=0 skips it) …")
            started = time.perf_counter()
            cursor.execute(definition)
            hnsw_s = time.perf_counter() - started
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [table, size.rows])
        cursor.execute(f"COMMENT ON TABLE {table} IS %s", [marker])
    return vectors, copy_s, index_s, hnsw_s


def vacuum(schema: str) -> float:
    """VACUUM ANALYZE (autocommit): hint bits and statistics set now, not during the search."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(f'VACUUM (ANALYZE) "{schema}".memory_memory')
    return time.perf_counter() - started


def verify_sample(schema: str, size: ScaleSize, vectors: np.ndarray) -> str:
    """Spot-check the loaded rows against what the production write path would have stored."""
    from django.db import connection

    rng = np.random.default_rng([SEED, 5])
    ids = sorted({int(i) for i in rng.integers(1, size.rows + 1, 200)})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, user_id, content, embedding::text, "
            "search_vector = to_tsvector('english', content) "
            f'FROM "{schema}".memory_memory WHERE id = ANY(%s) ORDER BY id',
            [ids],
        )
        rows = cursor.fetchall()
    bad = 0
    for memory_id, user_id, content, embedding, tsv_ok in rows:
        row = memory_id - 1
        user = row % size.users
        stored = np.asarray(embedding.strip("[]").split(","), dtype=np.float32)
        if (
            user_id != f"u{user:05d}"
            or content != content_of(row, user)
            or not tsv_ok
            or not np.array_equal(stored, vectors[row])
        ):
            bad += 1
    if bad or len(rows) != len(ids):
        raise RuntimeError(f"the loaded table does not match: {bad} of {len(ids)} sampled rows")
    return (
        f"{len(ids)} random rows checked: user, content, embedding (bit for bit) and "
        "search_vector = to_tsvector('english', content)"
    )


def ensure_table(schema: str, size: ScaleSize, hnsw: bool) -> tuple[np.ndarray, LoadInfo]:
    from django_tenants.utils import schema_context

    marker = marker_for(size, hnsw)
    with schema_context(schema):
        comment, count, indexes = table_state(schema)
        info = LoadInfo(size.rows, size.users, False, hnsw, marker)
        matches = (comment or "").partition("\n")[0] == marker
        if matches and count == size.rows:
            log(f"memory scale: reusing {count:,} memories in tenant {schema!r} (marker matches)")
            started = time.perf_counter()
            vectors = all_vectors(size)
            info.generate_s = time.perf_counter() - started
            info.reused = True
            info.recall_timings(comment or "")
        else:
            known = dict(indexes)
            if HNSW_INDEX not in known:  # dropped by an earlier load: take it from the model
                known[HNSW_INDEX] = hnsw_definition(schema)
            log(
                f"memory scale: loading {size.rows:,} memories ({size.users:,} users) with binary "
                f"COPY into tenant {schema!r} (found {count:,} rows, marker "
                f"{'matches' if matches else 'differs'}) …"
            )
            info.loaded_at = utc_now()
            vectors, info.copy_s, info.index_s, info.hnsw_s = load_table(
                schema, size, sorted(known.items()), hnsw, marker
            )
            log(
                f"memory scale: COPY {info.copy_s:.1f} s, indexes {info.index_s:.1f} s"
                + (f", HNSW {info.hnsw_s:.1f} s" if hnsw else "")
            )
            info.vacuum_s = vacuum(schema)
            log(f"memory scale: VACUUM ANALYZE {info.vacuum_s:.1f} s")
            set_comment(schema, marker + "\n" + json.dumps(info.timings()))
        info.verified = verify_sample(schema, size, vectors)
        info.table_bytes = table_bytes(schema)
        info.hnsw = HNSW_INDEX in dict(table_state(schema)[2])
    return vectors, info


def set_comment(schema: str, comment: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'COMMENT ON TABLE "{schema}".memory_memory IS %s', [comment])


def hnsw_definition(schema: str) -> str:
    return (
        f'CREATE INDEX {HNSW_INDEX} ON "{schema}".memory_memory USING hnsw '
        "(embedding vector_cosine_ops) WITH (m='16', ef_construction='64')"
    )


# Search ------------------------------------------------------------------------------------------


@dataclass
class ScaleResult:
    size: ScaleSize
    load: LoadInfo
    latencies_ms: list[float]
    recall_at_5: float
    perfect: int  # queries whose 5 results are exactly the exact top 5
    returned: float  # mean results per query
    plan: str  # EXPLAIN of the production query
    plan_analyze: str  # EXPLAIN ANALYZE, one query
    cpu: CpuUse
    users_queried: int = 0
    runtime_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def exact_top(vectors: np.ndarray, size: ScaleSize, user: int, query: np.ndarray) -> list[int]:
    """The user's ``K`` memory ids closest to ``query`` by cosine (ties: the smaller id)."""
    rows = np.arange(user, size.rows, size.users)
    scores = vectors[rows].astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((rows, -scores))[:K]
    return [int(rows[i]) + 1 for i in order]


def production_queryset(user: str, vector: list[float]) -> Any:
    """The queryset ``memory.selectors.nearest`` runs, for EXPLAIN."""
    from pgvector.django import CosineDistance

    from memory.selectors import HIT_FIELDS, live_memories

    return (
        live_memories(user)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance", "id")
        .values(*HIT_FIELDS, "distance")[:K]
    )


def plan_summary(plan: str) -> str:
    """The plan's nodes, outermost first, e.g. ``Limit → Sort → Index Scan using ...``."""
    return " → ".join(plan_nodes(plan))


def measure_search(schema: str, size: ScaleSize, vectors: np.ndarray) -> ScaleResult:
    from django_tenants.utils import schema_context

    from memory.selectors import search_memories

    users, queries = query_set(size)
    query_lists = [query.tolist() for query in queries]
    names = [f"u{int(user):05d}" for user in users]
    latencies: list[float] = []
    found: list[list[int]] = []
    with schema_context(schema):
        log(f"memory scale: {size.warmup} warm-up searches, then {size.queries:,} timed …")
        for name, vector in zip(names[: size.warmup], query_lists[: size.warmup], strict=True):
            search_memories(user_id=name, query="", vector=vector, limit=K, min_similarity=-1)
        meter = CpuMeter()
        for name, vector in zip(names[size.warmup :], query_lists[size.warmup :], strict=True):
            started = time.perf_counter()
            hits = search_memories(
                user_id=name, query="", vector=vector, limit=K, min_similarity=-1
            )
            latencies.append((time.perf_counter() - started) * 1000)
            found.append([hit.id for hit in hits])
        cpu = meter.stop()
        plan = production_queryset(names[-1], query_lists[-1]).explain()
        analyzed = production_queryset(names[-1], query_lists[-1]).explain(
            analyze=True, buffers=True
        )
    recalls, perfect = [], 0
    for got, user, query in zip(found, users[size.warmup :], queries[size.warmup :], strict=True):
        want = exact_top(vectors, size, int(user), query)
        recalls.append(len(set(got) & set(want)) / K)
        perfect += got == want
    return ScaleResult(
        size=size,
        load=LoadInfo(0, 0, False, False, ""),  # filled by the caller
        latencies_ms=latencies,
        recall_at_5=float(np.mean(recalls)),
        perfect=perfect,
        returned=float(np.mean([len(got) for got in found])),
        plan=plan_summary(plan),
        plan_analyze=analyzed,
        cpu=cpu,
        users_queried=len(set(users[size.warmup :].tolist())),
    )


def want_hnsw() -> bool:
    """Keep the production HNSW index on the bench table (default), or ``BENCH_MEMORY_HNSW=0``:
    load without it (about 5 minutes less on a first load of 1,000,000 rows here)."""
    return os.environ.get("BENCH_MEMORY_HNSW", "").strip() != "0"


def run_scale(schema: str, quick: bool) -> ScaleResult:
    started = time.perf_counter()
    size = QUICK if quick else FULL
    vectors, load = ensure_table(schema, size, want_hnsw())
    result = measure_search(schema, size, vectors)
    result.load = load
    result.runtime_s = time.perf_counter() - started
    return result
