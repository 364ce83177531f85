"""Writes of the knowledge base: collections, documents, and the ingestion job that indexes them.

Documents are stored first, as they were posted, with status ``pending``; the job then chunks,
embeds and indexes them a page at a time. Each page's old chunks are replaced in the same
transaction as its new ones (and the job's counters moved with them), so a job that fails midway
loses nothing: the documents it did not reach keep their text (and their previous chunks, if they
had any) and can be indexed again.

The embedder is the slow part (Cranfield: about nine tenths of an ingest), so it never waits for
the database: a page is embedded in a thread of the job's own while the page before it is written
(onnxruntime and httpx release the GIL), and the embedder sees a page's chunks in one call, so it
batches them by length across documents.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchVector
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.utils import timezone

from contextplatform.core.errors import ApiError
from sources import calibration
from sources.chunking import TextChunk, chunk_text
from sources.embedding import Embedder
from sources.models import Chunk, Collection, Document, IngestionJob
from sources.signals import collections_changed

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
    collections_changed()  # an update() sends no signal: the kept versions are stale


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


# Documents per page: one embedder call (which batches the page's chunks by length), one
# transaction. Cranfield (1.3 chunks a document), tokens run in batches of 32: 256 documents a
# page run 6 % more than the whole collection sorted at once (32: 40 %, 128: 11 %); the job's
# progress moves a page (~330 chunks) at a time, and at most two pages are held in memory.
DOCUMENTS_PER_PAGE = 256


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


@dataclass
class Page:
    """A page of the job: its document ids in the job's order, and those to index, prepared in
    the embedding thread (``prepared`` resolves to what ``prepare`` returns)."""

    ids: list[str]
    prepared: Future[tuple[list[PreparedDocument], DocumentFailed | None]]


def chunk_inputs(document: Document) -> tuple[list[TextChunk], list[str]]:
    pieces = chunk_text(document.text)
    title = document.title
    return pieces, [f"{title}\n{piece.text}" if title else piece.text for piece in pieces]


def prepare(
    documents: list[Document], embedder: Embedder
) -> tuple[list[PreparedDocument], DocumentFailed | None]:
    """Chunk and embed a page of documents in one embedder call. If the call fails, embed them one
    by one to find the document at fault: those before it are returned, with the failure.
    Touches no database: it runs in the job's embedding thread."""
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


def search_vector(title: str, text: str) -> SearchVector:
    """The chunk's tsvector from its own values, so the INSERT computes it (no UPDATE after)."""
    return SearchVector(Value(title), weight="A", config="english") + SearchVector(
        Value(text), weight="B", config="english"
    )


def write_page(prepared: list[PreparedDocument], *, job_id: str, processed: int) -> int:
    """Replace the prepared documents' chunks with their new ones and count them in the job, in
    one transaction: one DELETE, one INSERT (tsvector included), one UPDATE of the documents.
    Returns the chunk count."""
    with transaction.atomic():
        current = dict(
            Document.objects.select_for_update()
            .filter(pk__in=[item.document.pk for item in prepared])
            .values_list("pk", "content_hash")
        )
        # A document deleted or posted again since it was read is left to what changed it (a
        # new job indexes the new text): its chunks would be the old text's.
        prepared = [
            item for item in prepared if current.get(item.document.pk) == item.document.content_hash
        ]
        return replace_chunks(prepared, job_id=job_id, processed=processed)


def replace_chunks(prepared: list[PreparedDocument], *, job_id: str, processed: int) -> int:
    chunks = [
        Chunk(
            collection_id=item.document.collection_id,
            document=item.document,
            ordinal=piece.ordinal,
            title=item.document.title,
            text=piece.text,
            metadata={**item.document.metadata, "document_id": item.document.external_id},
            embedding=vector,
            search_vector=search_vector(item.document.title, piece.text),
        )
        for item in prepared
        for piece, vector in zip(item.pieces, item.vectors, strict=True)
    ]
    documents = [item.document for item in prepared]
    for item in prepared:
        item.document.status, item.document.error = "indexed", ""
        item.document.chunk_count = len(item.pieces)
        item.document.indexed_hash = item.document.content_hash
    if documents:
        Chunk.objects.filter(document__in=[d.pk for d in documents]).delete()
        Chunk.objects.bulk_create(chunks, batch_size=CHUNK_INSERT_BATCH)
        Document.objects.bulk_update(documents, ["status", "error", "chunk_count", "indexed_hash"])
        bump_version(documents[0].collection_id)
    IngestionJob.objects.filter(pk=job_id).update(
        chunks_written=F("chunks_written") + len(chunks), processed=F("processed") + processed
    )
    return len(chunks)


# Rows per INSERT statement: a page's chunks in one. Bound server-side, a statement takes at most
# 65,535 parameters (~12 a chunk row); past 5,000 rows Django splits it, in the same transaction.
CHUNK_INSERT_BATCH = 5000


def needs_indexing(document: Document) -> bool:
    return not (document.status == "indexed" and document.indexed_hash == document.content_hash)


def load_page(collection: Collection, ids: list[str]) -> list[Document]:
    """The page's documents that need indexing, in the job's order (unchanged or deleted ones
    are left out and counted as processed)."""
    found = {
        d.external_id: d
        for d in Document.objects.filter(collection=collection, external_id__in=ids)
    }
    return [found[i] for i in ids if i in found and needs_indexing(found[i])]


def finish_page(page: Page, job_id: str) -> None:
    """Write what the embedding thread prepared for the page; raise its failure after writing the
    documents before it."""
    prepared, failure = page.prepared.result()
    done_ids = {item.document.external_id for item in prepared}
    processed = page.ids.index(failure.external_id) if failure is not None else len(page.ids)
    skipped = [i for i in page.ids[:processed] if i not in done_ids]  # unchanged or deleted
    write_page(prepared, job_id=job_id, processed=len(done_ids) + len(skipped))
    if failure is not None:
        raise failure


def index_documents(job: IngestionJob, embedder: Embedder) -> None:
    """Every page of the job: the next one embedded while the one before it is written."""
    ids = list(job.document_ids)
    pages: deque[Page] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-embed") as embedding:
        try:
            for start in range(0, len(ids), DOCUMENTS_PER_PAGE):
                page_ids = ids[start : start + DOCUMENTS_PER_PAGE]
                todo = load_page(job.collection, page_ids)
                pages.append(Page(page_ids, embedding.submit(prepare, todo, embedder)))
                if len(pages) > 1:  # one page embedding ahead, no more held in memory
                    finish_page(pages.popleft(), job.pk)
            while pages:
                finish_page(pages.popleft(), job.pk)
        finally:
            for page in pages:  # a failure: what has not started need not run
                page.prepared.cancel()


def run_ingestion_job(job_id: str, embedder: Embedder) -> IngestionJob:
    """Index every document of the job, a page at a time; on the first failure record why and stop."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    if job.status in {"done", "failed"}:
        return job
    IngestionJob.objects.filter(pk=job_id).update(status="running", started_at=timezone.now())
    collection = job.collection
    version_at_start = collection.version
    try:
        ensure_embedder_matches(collection, embedder)
        if not collection.embedder:
            Collection.objects.filter(pk=collection.pk, embedder="").update(
                embedder=embedder.identity
            )
            collections_changed()
        index_documents(job, embedder)
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
        collection.refresh_from_db(fields=["version"])
        if collection.version != version_at_start:  # the pages before the failure were stored
            calibrate_unless_another_will(collection.pk, job_id, embedder, finish=None)
    else:
        calibrate_unless_another_will(collection.pk, job_id, embedder, finish=mark_done)
    return IngestionJob.objects.get(pk=job_id)


# A calibration that keeps being overtaken by new documents gives up after this many rounds: the
# job is done, and the next job of the collection calibrates what it then holds.
CALIBRATION_ROUNDS = 3


def calibrate_unless_another_will(
    collection_id: int,
    job_id: str,
    embedder: Embedder,
    finish: Callable[[str], None] | None,
) -> None:
    """Measure the collection's judge calibration after a job, then ``finish`` it (mark it done;
    a failed job is marked already).

    A calibration embeds and recalls a few hundred sentences of the collection: seconds of a
    worker. Documents posted one at a time would pay that for every one, and the queue behind
    them (memory writes too) would grow without end. So a job leaves it to another job of the
    same collection that is queued or running: that one ends after this one's documents are
    stored and calibrates them with its own. The check and this job's end are one transaction
    under the collection's row lock, so of two jobs ending together the later sees the other
    done and calibrates. A calibration overtaken by a newer version (a job that ended while it
    ran, and left it to this one) measures again."""
    for _ in range(CALIBRATION_ROUNDS):
        with transaction.atomic():
            version = Collection.objects.select_for_update().values_list("version", flat=True)
            measured_version = version.get(pk=collection_id)
            others = IngestionJob.objects.filter(
                collection_id=collection_id, status__in=("queued", "running")
            ).exclude(pk=job_id)
            if others.exists():
                if finish is not None:
                    finish(job_id)
                return
        calibration.refresh(collection_id, embedder)
        with transaction.atomic():
            version = Collection.objects.select_for_update().values_list("version", flat=True)
            if version.get(pk=collection_id) == measured_version:
                if finish is not None:
                    finish(job_id)
                return
    if finish is not None:
        finish(job_id)


def mark_done(job_id: str) -> None:
    IngestionJob.objects.filter(pk=job_id).update(status="done", finished_at=timezone.now())
