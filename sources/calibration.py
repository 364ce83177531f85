"""A collection's judge calibration, measured on its own chunks and stored with it.

Run after every ingestion job that finishes (``sources.ingestion.run_ingestion_job``), so the
calibration follows the collection as documents arrive, change or go. Sentences sampled from the
chunks stand for questions (``sources/judge_calibration.py`` says why and what the score then
means); each is embedded, recalled through the same HNSW search a request uses, and held against
its own chunk and random other chunks. A failure here is logged and leaves the previous
calibration (or the prior) in place: it never fails the ingestion.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
from django.utils import timezone

from sources.embedding import Embedder
from sources.judge_calibration import (
    BACKGROUNDS_PER_QUERY,
    PRIOR,
    Candidate,
    JudgeCalibration,
    calibrate,
    pseudo_queries,
)
from sources.models import Chunk, Collection
from sources.recall import nearest_chunks

logger = logging.getLogger("contextplatform.sources")

RECALL_TOP_K = 20  # the default match block's recall: the judge sees at most these
SAMPLED_CHUNKS = 2000  # chunks the sentences and the background are drawn from


def chunk_text(title: str, text: str) -> str:
    """A chunk as the judge reads it (title line, then text)."""
    return f"{title}\n{text}" if title else text


def measure(collection: Collection, embedder: Embedder) -> JudgeCalibration | None:
    """The collection's calibration from its current chunks (None below two documents)."""
    seed = collection.pk * 1_000_003 + collection.version
    ids = list(Chunk.objects.filter(collection=collection).values_list("id", flat=True))
    if len(ids) < 2:
        return None
    sample = random.Random(seed).sample(ids, min(SAMPLED_CHUNKS, len(ids)))
    rows = list(
        Chunk.objects.filter(id__in=sample).values(
            "id", "document_id", "title", "text", "embedding"
        )
    )
    if len({row["document_id"] for row in rows}) < 2:
        return None
    queries = pseudo_queries([row["text"] for row in rows], seed=seed)
    if not queries:
        return None
    vectors = np.asarray(embedder.embed([query.text for query in queries]), dtype=np.float32)
    chunk_vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
    draw = random.Random(seed + 1)
    candidates = [
        _candidates(query.owner, vector, rows, chunk_vectors, collection.pk, draw)
        for query, vector in zip(queries, vectors, strict=True)
    ]
    return calibrate(
        queries,
        candidates,
        documents=collection.documents.count(),
        origin=f"collection {collection.name} v{collection.version}",
    )


def _candidates(
    owner: int,
    vector: np.ndarray,
    rows: list[dict[str, Any]],
    chunk_vectors: np.ndarray,
    collection_id: int,
    draw: random.Random,
) -> list[Candidate]:
    """A pseudo-query's candidate set as the judge would see it: its recall (the request's own
    HNSW search), its own chunk, and random chunks of other documents."""
    own = rows[owner]
    cosines = chunk_vectors @ vector
    recalled = nearest_chunks([collection_id], vector.tolist(), RECALL_TOP_K, None)
    found: dict[int, Candidate] = {}
    for row, cosine in recalled:
        if row["id"] != own["id"]:
            found[row["id"]] = Candidate(chunk_text(row["title"], row["text"]), cosine, "recalled")
    found[own["id"]] = Candidate(
        chunk_text(own["title"], own["text"]), float(cosines[owner]), "own"
    )
    others = [i for i, row in enumerate(rows) if row["document_id"] != own["document_id"]]
    for index in draw.sample(others, min(BACKGROUNDS_PER_QUERY, len(others))):
        row = rows[index]
        found[row["id"]] = Candidate(
            chunk_text(row["title"], row["text"]), float(cosines[index]), "background"
        )
    return list(found.values())


def refresh(collection_id: int, embedder: Embedder) -> None:
    """Measure and store the collection's calibration; logged, never raised."""
    collection = Collection.objects.get(pk=collection_id)
    try:
        measured = measure(collection, embedder)
    except Exception as error:  # the ingestion stands; the previous calibration stays
        logger.warning(
            "judge_calibration_failed",
            extra={"collection": collection.name, "error": f"{type(error).__name__}: {error}"},
        )
        return
    Collection.objects.filter(pk=collection_id).update(
        judge_calibration=None if measured is None else measured.as_dict(),
        judge_calibrated_at=timezone.now(),
    )


def calibration_of(collection: Collection) -> JudgeCalibration:
    """What the local judge uses for the collection's candidates: its own, else the prior."""
    if collection.judge_calibration:
        try:
            return JudgeCalibration.from_dict(collection.judge_calibration)
        except (KeyError, TypeError, ValueError):
            pass  # written by another version: the prior until the next ingestion
    return PRIOR
