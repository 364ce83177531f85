"""A job that fails midway loses nothing: documents keep their text and their previous chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tenants.utils import schema_context

from sources.embedding import Embedder, EmbeddingError, get_embedder
from sources.ingestion import DocumentInput, create_collection, run_ingestion_job, submit_documents
from sources.models import Chunk, Document


class FailingOn(Embedder):
    """The real local embedder, except that it fails on texts containing a marker."""

    def __init__(self, marker: str):
        self.inner = get_embedder()
        self.identity = self.inner.identity
        self.dimensions = self.inner.dimensions
        self.marker = marker

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if any(self.marker in text for text in texts):
            raise EmbeddingError("embedding service unavailable")
        return self.inner.embed(texts)


def docs(*pairs: tuple[str, str]) -> list[DocumentInput]:
    return [DocumentInput(id=doc_id, text=text, title=doc_id.title()) for doc_id, text in pairs]


def test_a_failed_job_says_why_and_loses_no_document(acme: Any) -> None:
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        first = submit_documents(
            collection=collection, documents=docs(("a", "Alpha version one."), ("b", "Beta one."))
        )
        assert run_ingestion_job(first.id, get_embedder()).status == "done"

        second = submit_documents(
            collection=collection,
            documents=docs(
                ("a", "Alpha version two."), ("b", "Beta two FAIL-HERE."), ("c", "Gamma one.")
            ),
        )
        job = run_ingestion_job(second.id, FailingOn("FAIL-HERE"))
        assert job.status == "failed"
        assert "document 'b'" in job.error and "embedding service unavailable" in job.error
        assert job.processed == 1 and 0 < job.progress < 1

        documents = {d.external_id: d for d in Document.objects.filter(collection=collection)}
        assert documents["a"].status == "indexed"  # done before the failure
        assert documents["b"].status == "failed" and documents["b"].text == "Beta two FAIL-HERE."
        assert documents["c"].status == "pending" and documents["c"].text == "Gamma one."
        texts = set(Chunk.objects.filter(collection=collection).values_list("text", flat=True))
        assert texts == {"Alpha version two.", "Beta one."}  # b keeps its previous chunks

        retry = submit_documents(
            collection=collection, documents=docs(("b", "Beta two."), ("c", "Gamma one."))
        )
        assert run_ingestion_job(retry.id, get_embedder()).status == "done"
        texts = set(Chunk.objects.filter(collection=collection).values_list("text", flat=True))
        assert texts == {"Alpha version two.", "Beta two.", "Gamma one."}


def test_unchanged_documents_are_not_reindexed(acme: Any) -> None:
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        job = submit_documents(collection=collection, documents=docs(("a", "Alpha.")))
        run_ingestion_job(job.id, get_embedder())
        before = Chunk.objects.get(document__external_id="a").pk
        again = submit_documents(collection=collection, documents=docs(("a", "Alpha.")))
        assert (
            run_ingestion_job(again.id, FailingOn("Alpha")).status == "done"
        )  # never embedded again
        assert Chunk.objects.get(document__external_id="a").pk == before


def test_a_submission_stores_its_documents_in_one_statement(acme: Any) -> None:
    """However many documents, one read of the existing ones and one upsert (plus the job)."""
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        first = docs(*((f"d{i}", f"Document number {i}.") for i in range(40)))
        submit_documents(collection=collection, documents=first)
        changed = docs(*((f"d{i}", f"Document number {i}, revised.") for i in range(30, 60)))
        with CaptureQueriesContext(connection) as queries:
            job = submit_documents(collection=collection, documents=[*changed, changed[0]])
        writes = [q["sql"] for q in queries.captured_queries if "sources_document" in q["sql"]]
        assert len(writes) == 2 and writes[1].startswith("INSERT")
        assert job.total == 30 and job.document_ids == [f"d{i}" for i in range(30, 60)]
        stored = dict(
            Document.objects.filter(collection=collection).values_list("external_id", "text")
        )
        assert len(stored) == 60 and stored["d5"] == "Document number 5."
        assert stored["d35"] == "Document number 35, revised." and stored["d59"].endswith(
            "revised."
        )
