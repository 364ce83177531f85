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

from contextplatform.api.errors import ApiError
from sources.chunking import chunk_text
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
    payload = f"{document.title}\x00{document.text}\x00{sorted((document.metadata or {}).items())!r}"
    return hashlib.sha256(payload.encode()).hexdigest()


def create_collection(*, name: str, description: str = "") -> Collection:
    try:
        with transaction.atomic():
            return Collection.objects.create(name=name, description=description)
    except IntegrityError:
        raise ApiError("conflict", f"collection {name!r} already exists", status=409, param="name") from None


def ensure_embedder_matches(collection: Collection, embedder: Embedder) -> None:
    if collection.embedder and collection.embedder != embedder.identity:
        raise ApiError(
            "embedder_mismatch",
            f"collection {collection.name!r} was filled by embedder {collection.embedder!r}; "
            f"the configured embedder is {embedder.identity!r}. Re-create the collection to switch.",
            status=409,
        )


def bump_version(collection_id: int) -> None:
    Collection.objects.filter(pk=collection_id).update(version=F("version") + 1, updated_at=timezone.now())


def submit_documents(*, collection: Collection, documents: Sequence[DocumentInput]) -> IngestionJob:
    """Store the documents (pending) and a queued job that will index them."""
    with transaction.atomic():
        existing = {
            doc.external_id: doc
            for doc in Document.objects.filter(collection=collection, external_id__in=[d.id for d in documents])
        }
        for document in documents:
            digest = content_hash(document)
            current = existing.get(document.id)
            if current is not None and current.status == "indexed" and current.indexed_hash == digest:
                continue  # unchanged: nothing to re-index
            Document.objects.update_or_create(
                collection=collection,
                external_id=document.id,
                defaults={
                    "title": document.title,
                    "text": document.text,
                    "metadata": document.metadata or {},
                    "content_hash": digest,
                    "status": "pending",
                    "error": "",
                },
            )
        job = IngestionJob.objects.create(
            id="job_" + secrets.token_hex(12),
            collection=collection,
            document_ids=[document.id for document in documents],
            total=len(documents),
        )
    return job


def delete_document(*, collection: Collection, external_id: str) -> bool:
    with transaction.atomic():
        deleted, _ = Document.objects.filter(collection=collection, external_id=external_id).delete()
        if deleted:
            bump_version(collection.pk)
    return bool(deleted)


def index_document(document: Document, embedder: Embedder) -> int:
    """Replace the document's chunks with freshly embedded ones, atomically. Returns the chunk count."""
    pieces = chunk_text(document.text)
    title = document.title
    vectors = embedder.embed([f"{title}\n{piece.text}" if title else piece.text for piece in pieces]) if pieces else []
    metadata = {**document.metadata, "document_id": document.external_id}
    with transaction.atomic():
        Chunk.objects.filter(document=document).delete()
        Chunk.objects.bulk_create(
            [
                Chunk(
                    collection_id=document.collection_id,
                    document=document,
                    ordinal=piece.ordinal,
                    title=title,
                    text=piece.text,
                    metadata=metadata,
                    embedding=vector,
                )
                for piece, vector in zip(pieces, vectors, strict=True)
            ]
        )
        Chunk.objects.filter(document=document).update(
            search_vector=SearchVector("title", weight="A", config="english")
            + SearchVector("text", weight="B", config="english")
        )
        Document.objects.filter(pk=document.pk).update(
            status="indexed", error="", chunk_count=len(pieces), indexed_hash=document.content_hash
        )
        bump_version(document.collection_id)
    return len(pieces)


def run_ingestion_job(job_id: str, embedder: Embedder) -> IngestionJob:
    """Index every document of the job; on the first failure record why and stop."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    if job.status in {"done", "failed"}:
        return job
    IngestionJob.objects.filter(pk=job_id).update(status="running", started_at=timezone.now())
    collection = job.collection
    current: str | None = None
    try:
        ensure_embedder_matches(collection, embedder)
        if not collection.embedder:
            Collection.objects.filter(pk=collection.pk, embedder="").update(embedder=embedder.identity)
        for external_id in job.document_ids:
            current = external_id
            document = Document.objects.filter(collection=collection, external_id=external_id).first()
            if document is not None and not (
                document.status == "indexed" and document.indexed_hash == document.content_hash
            ):
                written = index_document(document, embedder)
                IngestionJob.objects.filter(pk=job_id).update(chunks_written=F("chunks_written") + written)
            IngestionJob.objects.filter(pk=job_id).update(processed=F("processed") + 1)
    except Exception as error:
        reason = f"document {current!r}: {error}" if current else str(error)
        if isinstance(error, ApiError):
            reason = error.message
        logger.warning("ingestion_failed", extra={"job": job_id, "error": reason})
        if current:
            Document.objects.filter(collection=collection, external_id=current).update(status="failed", error=reason[:2000])
        IngestionJob.objects.filter(pk=job_id).update(status="failed", error=reason[:2000], finished_at=timezone.now())
    else:
        IngestionJob.objects.filter(pk=job_id).update(status="done", finished_at=timezone.now())
    return IngestionJob.objects.get(pk=job_id)
