"""A collection's judge calibration, measured on its own chunks and stored with it.

Run after an ingestion job finishes (``sources.ingestion.run_ingestion_job``), so the
calibration follows the collection as documents arrive, change or go; of a burst of jobs of one
collection, the last calibrates for all (``sources.ingestion.calibrate_unless_another_will``). Sentences sampled from the
chunks stand for questions (``sources/judge_calibration.py`` says why and what the score then
means); each is embedded, recalled through the same HNSW search a request uses, and held against
its own chunk and random other chunks. A failure here is logged and leaves the previous
calibration (or the prior) in place: it never fails the ingestion.
"""

from __future__ import annotations

import logging
import random

import numpy as np
from django.utils import timezone

from sources.embedding import Embedder
from sources.judge_calibration import (
    PRIOR,
    JudgeCalibration,
    calibrate,
    candidate_set,
    pseudo_queries,
)
from sources.models import Chunk, Collection
from sources.recall import nearest_chunks
from sources.signals import collections_changed

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
    pool = [(row["id"], chunk_text(row["title"], row["text"])) for row in rows]
    documents = [row["document_id"] for row in rows]
    draw = random.Random(seed + 1)
    candidates = [
        candidate_set(
            query.owner,
            pool,
            documents,
            (chunk_vectors @ vector).tolist(),
            # the recall is the request's own HNSW search over the whole collection
            (
                (row["id"], chunk_text(row["title"], row["text"]), cosine)
                for row, cosine in nearest_chunks(
                    [collection.pk], vector.tolist(), RECALL_TOP_K, None
                )
            ),
            draw,
        )
        for query, vector in zip(queries, vectors, strict=True)
    ]
    return calibrate(
        queries,
        candidates,
        documents=collection.documents.count(),
        origin=f"collection {collection.name} v{collection.version}",
    )


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
    collections_changed()  # an update() sends no signal: the kept calibrations are stale


def calibration_of(collection: Collection) -> JudgeCalibration:
    """What the local judge uses for the collection's candidates: its own, else the prior."""
    if collection.judge_calibration:
        try:
            return JudgeCalibration.from_dict(collection.judge_calibration)
        except (KeyError, TypeError, ValueError):
            pass  # written by another version: the prior until the next ingestion
    return PRIOR
