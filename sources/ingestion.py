"""Writes of the knowledge base: collections, documents, and the ingestion job that indexes them.

Documents are stored first, as they were posted, with status ``pending``; the job then chunks,
embeds and indexes them one by one. Each document's old chunks are replaced in the same
transaction as its new ones, so a job that fails midway loses nothing: the documents it did not
reach keep their text (and their previous chunks, if they had any) and can be indexed again.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchVector
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from contextplatform.core.errors import ApiError
from sources import calibration
from sources.chunking import TextChunk, chunk_text
from sources.embedding import Embedder
from sources.models import Chunk, Collection, Document, IngestionJob

logger = logging.getLogger("contextplatform.ingestion")


@dataclass(frozen=True)
class DocumentInput:
    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] | None = None


def content_hash(document: DocumentInput) -> str:
    payload = (
        f"{document.title}\x00{document.text}\x00{sorted((document.metadata or {}).items())!r}"
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def create_collection(*, name: str, description: str = "") -> Collection:
    try:
        with transaction.atomic():
            return Collection.objects.create(name=name, description=description)
    except IntegrityError:
        raise ApiError(
            "conflict", f"collection {name!r} already exists", status=409, param="name"
        ) from None


def ensure_embedder_matches(collection: Collection, embedder: Embedder) -> None:
    if collection.embedder and collection.embedder != embedder.identity:
        raise ApiError(
            "embedder_mismatch",
            f"collection {collection.name!r} was filled by embedder {collection.embedder!r}; "
            f"the configured embedder is {embedder.identity!r}. Re-create the collection to switch.",
            status=409,
        )


def bump_version(collection_id: int) -> None:
    Collection.objects.filter(pk=collection_id).update(
        version=F("version") + 1, updated_at=timezone.now()
    )


UPSERT_BATCH = 500
PENDING_FIELDS = ["title", "text", "metadata", "content_hash", "status", "error"]


def submit_documents(*, collection: Collection, documents: Sequence[DocumentInput]) -> IngestionJob:
    """Store the documents (pending) and a queued job that will index them."""
    latest = {document.id: document for document in documents}  # a repeated id: the last wins
    with transaction.atomic():
        existing = {
            doc.external_id: doc
            for doc in Document.objects.filter(collection=collection, external_id__in=list(latest))
        }
        rows = []
        for document in latest.values():
            digest = content_hash(document)
            current = existing.get(document.id)
            if (
                current is not None
                and current.status == "indexed"
                and current.indexed_hash == digest
            ):
                continue  # unchanged: nothing to re-index
            rows.append(
                Document(
                    collection=collection,
                    external_id=document.id,
                    title=document.title,
                    text=document.text,
                    metadata=document.metadata or {},
                    content_hash=digest,
                    status="pending",
                    error="",
                )
            )
        Document.objects.bulk_create(
            rows,
            batch_size=UPSERT_BATCH,
            update_conflicts=True,
            unique_fields=["collection", "external_id"],
            update_fields=[*PENDING_FIELDS, "updated_at"],
        )
        job = IngestionJob.objects.create(
            id="job_" + secrets.token_hex(12),
            collection=collection,
            document_ids=list(latest),
            total=len(latest),
        )
    return job


def delete_document(*, collection: Collection, external_id: str) -> bool:
    with transaction.atomic():
        deleted, _ = Document.objects.filter(
            collection=collection, external_id=external_id
        ).delete()
        if deleted:
            bump_version(collection.pk)
    return bool(deleted)


EMBED_DOCUMENTS_PER_BATCH = 32


class DocumentFailed(Exception):
    def __init__(self, external_id: str, error: Exception):
        super().__init__(str(error))
        self.external_id = external_id
        self.error = error


@dataclass
class PreparedDocument:
    document: Document
    pieces: list[TextChunk]
    vectors: list[list[float]]


def chunk_inputs(document: Document) -> tuple[list[TextChunk], list[str]]:
    pieces = chunk_text(document.text)
    title = document.title
    return pieces, [f"{title}\n{piece.text}" if title else piece.text for piece in pieces]


def prepare(
    documents: list[Document], embedder: Embedder
) -> tuple[list[PreparedDocument], DocumentFailed | None]:
    """Chunk and embed a batch of documents in one embedder call. If the call fails, embed them one
    by one to find the document at fault: those before it are returned, with the failure."""
    inputs = [chunk_inputs(document) for document in documents]
    texts = [text for _, document_texts in inputs for text in document_texts]
    try:
        vectors = embedder.embed(texts) if texts else []
    except Exception:
        prepared: list[PreparedDocument] = []
        for document, (pieces, document_texts) in zip(documents, inputs, strict=True):
            try:
                prepared.append(
                    PreparedDocument(
                        document, pieces, embedder.embed(document_texts) if document_texts else []
                    )
                )
            except Exception as error:
                return prepared, DocumentFailed(document.external_id, error)
        return prepared, None
    prepared, offset = [], 0
    for document, (pieces, _) in zip(documents, inputs, strict=True):
        prepared.append(PreparedDocument(document, pieces, vectors[offset : offset + len(pieces)]))
        offset += len(pieces)
    return prepared, None


def write_chunks(prepared: PreparedDocument) -> int:
    """Replace the document's chunks with the new ones, atomically. Returns the chunk count."""
    document = prepared.document
    metadata = {**document.metadata, "document_id": document.external_id}
    with transaction.atomic():
        Chunk.objects.filter(document=document).delete()
        Chunk.objects.bulk_create(
            [
                Chunk(
                    collection_id=document.collection_id,
                    document=document,
                    ordinal=piece.ordinal,
                    title=document.title,
                    text=piece.text,
                    metadata=metadata,
                    embedding=vector,
                )
                for piece, vector in zip(prepared.pieces, prepared.vectors, strict=True)
            ]
        )
        Chunk.objects.filter(document=document).update(
            search_vector=SearchVector("title", weight="A", config="english")
            + SearchVector("text", weight="B", config="english")
        )
        Document.objects.filter(pk=document.pk).update(
            status="indexed",
            error="",
            chunk_count=len(prepared.pieces),
            indexed_hash=document.content_hash,
        )
        bump_version(document.collection_id)
    return len(prepared.pieces)


def needs_indexing(document: Document) -> bool:
    return not (document.status == "indexed" and document.indexed_hash == document.content_hash)


def run_ingestion_job(job_id: str, embedder: Embedder) -> IngestionJob:
    """Index every document of the job, a batch at a time; on the first failure record why and stop."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    if job.status in {"done", "failed"}:
        return job
    IngestionJob.objects.filter(pk=job_id).update(status="running", started_at=timezone.now())
    collection = job.collection
    try:
        ensure_embedder_matches(collection, embedder)
        if not collection.embedder:
            Collection.objects.filter(pk=collection.pk, embedder="").update(
                embedder=embedder.identity
            )
        ids = list(job.document_ids)
        for start in range(0, len(ids), EMBED_DOCUMENTS_PER_BATCH):
            batch_ids = ids[start : start + EMBED_DOCUMENTS_PER_BATCH]
            found = {
                d.external_id: d
                for d in Document.objects.filter(collection=collection, external_id__in=batch_ids)
            }
            todo = [found[i] for i in batch_ids if i in found and needs_indexing(found[i])]
            prepared, failure = prepare(todo, embedder)
            written = sum(write_chunks(item) for item in prepared)
            done_ids = {item.document.external_id for item in prepared}
            if failure is not None:
                processed = batch_ids.index(failure.external_id)
            else:
                processed = len(batch_ids)
            skipped = [
                i for i in batch_ids[:processed] if i not in done_ids
            ]  # unchanged or deleted
            IngestionJob.objects.filter(pk=job_id).update(
                chunks_written=F("chunks_written") + written,
                processed=F("processed") + len(done_ids) + len(skipped),
            )
            if failure is not None:
                raise failure
    except Exception as error:
        reason = str(error)
        if isinstance(error, DocumentFailed):
            reason = f"document {error.external_id!r}: {error.error}"
            Document.objects.filter(collection=collection, external_id=error.external_id).update(
                status="failed", error=reason[:2000]
            )
        elif isinstance(error, ApiError):
            reason = error.message
        logger.warning("ingestion_failed", extra={"job": job_id, "error": reason})
        IngestionJob.objects.filter(pk=job_id).update(
            status="failed", error=reason[:2000], finished_at=timezone.now()
        )
    else:
        calibration.refresh(collection.pk, embedder)
        IngestionJob.objects.filter(pk=job_id).update(status="done", finished_at=timezone.now())
    return IngestionJob.objects.get(pk=job_id)
