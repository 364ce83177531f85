"""The ingestion job a page at a time: documents embedded together across pages come out as if
each were embedded alone, the next page is embedded while the one before it is written, and a
failure in the middle of a page loses nothing already indexed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from django.contrib.postgres.search import SearchVector
from django.db.models import TextField
from django.db.models.functions import Cast
from django_tenants.utils import schema_context

from sources import ingestion
from sources.chunking import chunk_text
from sources.embedding import Embedder, EmbeddingError, get_embedder
from sources.ingestion import DocumentInput, create_collection, run_ingestion_job, submit_documents
from sources.models import Chunk, Document, IngestionJob

SENTENCE = "The boundary layer thickens downstream of the leading edge in supersonic flow."


def long_text(doc_id: str, sentences: int) -> str:
    """Enough sentences for several ~200-word chunks, each naming the document."""
    return " ".join(f"Document {doc_id} sentence {i}: {SENTENCE}" for i in range(sentences))


def corpus() -> list[DocumentInput]:
    """Seven documents of one to seven chunks: pages of 3 split them 3 + 3 + 1."""
    sizes = {"a": 1, "b": 40, "c": 2, "d": 70, "e": 1, "f": 25, "g": 3}
    return [
        DocumentInput(
            id=doc_id, title=f"Title {doc_id}", text=long_text(doc_id, n), metadata={"n": n}
        )
        for doc_id, n in sizes.items()
    ]


class Recording(Embedder):
    """The real local embedder, recording each call's texts and thread; it fails on a marker."""

    def __init__(self, fail_on: str = "") -> None:
        self.inner = get_embedder()
        self.identity = self.inner.identity
        self.dimensions = self.inner.dimensions
        self.fail_on = fail_on
        self.calls: list[tuple[list[str], str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append((list(texts), threading.current_thread().name))
        if self.fail_on and any(self.fail_on in text for text in texts):
            raise EmbeddingError("embedding service unavailable")
        return self.inner.embed(texts)


@pytest.fixture
def pages_of_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingestion, "DOCUMENTS_PER_PAGE", 3)


def test_documents_of_several_pages_are_indexed_as_if_embedded_alone(
    acme: Any, pages_of_3: None
) -> None:
    documents = corpus()
    embedder = Recording()
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        job = run_ingestion_job(
            submit_documents(collection=collection, documents=documents).id, embedder
        )
        assert job.status == "done", job.error
        expected_chunks = {d.id: chunk_text(d.text) for d in documents}
        total = sum(len(pieces) for pieces in expected_chunks.values())
        assert (job.processed, job.total, job.chunks_written) == (7, 7, total)
        assert total > 7  # some documents span several chunks

        # One embedder call per page, each holding every chunk of its documents, off the job's
        # thread; the calibration's sentences come after, in the job's thread.
        page_calls = [(texts, thread) for texts, thread in embedder.calls[:3]]
        assert [len(texts) for texts, _ in page_calls] == [
            sum(len(expected_chunks[i]) for i in ids) for ids in ("abc", "def", "g")
        ]
        assert all(thread.startswith("ingest-embed") for _, thread in page_calls)

        stored = {d.external_id: d for d in Document.objects.filter(collection=collection)}
        for document in documents:
            row = stored[document.id]
            pieces = expected_chunks[document.id]
            assert (row.status, row.error, row.chunk_count) == ("indexed", "", len(pieces))
            assert row.indexed_hash == row.content_hash
            chunks = list(Chunk.objects.filter(document=row).order_by("ordinal"))
            assert [(c.ordinal, c.text, c.title) for c in chunks] == [
                (p.ordinal, p.text, document.title) for p in pieces
            ]
            assert all(
                c.metadata == {"n": document.metadata["n"], "document_id": document.id}
                for c in chunks
            )  # type: ignore[index]
            alone = get_embedder().embed([f"{document.title}\n{p.text}" for p in pieces])
            np.testing.assert_allclose(
                np.array([c.embedding for c in chunks]), np.array(alone), atol=1e-5
            )

        # The tsvector the INSERT computed is the one the columns give.
        pairs = Chunk.objects.filter(collection=collection).values_list(
            Cast("search_vector", TextField()),
            Cast(
                SearchVector("title", weight="A", config="english")
                + SearchVector("text", weight="B", config="english"),
                TextField(),
            ),
        )
        assert len(pairs) == total and all(stored == expected for stored, expected in pairs)


def test_the_next_page_is_embedded_while_the_one_before_is_written(
    acme: Any, pages_of_3: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    second_page_embedding = threading.Event()
    embedder = Recording()
    original_embed = embedder.embed

    def embed(texts: Sequence[str]) -> list[list[float]]:
        if any("Document d " in text for text in texts):
            second_page_embedding.set()
        return original_embed(texts)

    monkeypatch.setattr(embedder, "embed", embed)
    overlapped: list[bool] = []
    original_write = ingestion.write_page

    def write_page(prepared: list[ingestion.PreparedDocument], **kwargs: Any) -> int:
        if not overlapped:  # the first page's write waits for the second page's embedding
            overlapped.append(second_page_embedding.wait(timeout=30))
        return original_write(prepared, **kwargs)

    monkeypatch.setattr(ingestion, "write_page", write_page)
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        job = run_ingestion_job(
            submit_documents(collection=collection, documents=corpus()).id, embedder
        )
    assert job.status == "done", job.error
    assert overlapped == [True]


def test_a_failure_in_the_middle_of_a_page_loses_nothing_indexed(
    acme: Any, pages_of_3: None
) -> None:
    documents = corpus()
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        first = submit_documents(collection=collection, documents=documents)
        assert run_ingestion_job(first.id, get_embedder()).status == "done"
        before = {
            d: list(
                Chunk.objects.filter(document__external_id=d)
                .order_by("ordinal")
                .values_list("text", flat=True)
            )
            for d in "abcdefg"
        }

        # Every document changes; "e", the middle of the second page, cannot be embedded.
        changed = [
            DocumentInput(
                id=d.id,
                title=d.title,
                text=d.text.replace("sentence", "FAIL-HERE sentence" if d.id == "e" else "line"),
                metadata=d.metadata,
            )
            for d in documents
        ]
        second = submit_documents(collection=collection, documents=changed)
        job = run_ingestion_job(second.id, Recording(fail_on="FAIL-HERE"))
        assert job.status == "failed"
        assert "document 'e'" in job.error and "embedding service unavailable" in job.error
        new = {d.id: chunk_text(d.text) for d in changed}
        # Page one (a, b, c) and "d" before the failure are indexed and counted; no more.
        assert job.processed == 4
        assert job.chunks_written == sum(len(new[d]) for d in "abcd")

        stored = {d.external_id: d for d in Document.objects.filter(collection=collection)}
        for d in "abcd":
            assert stored[d].status == "indexed"
            texts = list(
                Chunk.objects.filter(document=stored[d])
                .order_by("ordinal")
                .values_list("text", flat=True)
            )
            assert texts == [p.text for p in new[d]]
        assert stored["e"].status == "failed" and "FAIL-HERE" in stored["e"].text
        for d in "fg":  # not reached: pending, their new text stored, their old chunks kept
            assert stored[d].status == "pending" and "line" in stored[d].text
        for d in "efg":
            texts = list(
                Chunk.objects.filter(document=stored[d])
                .order_by("ordinal")
                .values_list("text", flat=True)
            )
            assert texts == before[d]

        retry = submit_documents(
            collection=collection,
            documents=[
                DocumentInput(id="e", title="Title e", text="Fixed.", metadata={"n": 1}),
                *(d for d in changed if d.id in "fg"),
            ],
        )
        done = run_ingestion_job(retry.id, get_embedder())
        assert done.status == "done" and done.processed == 3
        assert not Document.objects.filter(collection=collection).exclude(status="indexed").exists()


def test_a_document_posted_again_while_its_page_was_embedded_is_left_to_the_new_job(
    acme: Any, pages_of_3: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original_write = ingestion.write_page

    def write_page(prepared: list[ingestion.PreparedDocument], **kwargs: Any) -> int:
        # "b" is posted again between its read and its write (another request, committed).
        Document.objects.filter(external_id="b").update(
            text="Beta, revised.", content_hash="revised", status="pending"
        )
        return original_write(prepared, **kwargs)

    monkeypatch.setattr(ingestion, "write_page", write_page)
    with schema_context(acme.schema):
        collection = create_collection(name="kb")
        job = run_ingestion_job(
            submit_documents(collection=collection, documents=corpus()[:3]).id, get_embedder()
        )
        assert job.status == "done" and job.processed == 3
        b = Document.objects.get(collection=collection, external_id="b")
        assert (b.status, b.text) == ("pending", "Beta, revised.")
        assert not Chunk.objects.filter(document=b).exists()  # not the old text's chunks
        indexed = Document.objects.filter(collection=collection, status="indexed")
        assert sorted(indexed.values_list("external_id", flat=True)) == ["a", "c"]
        assert IngestionJob.objects.get(pk=job.pk).chunks_written == sum(
            len(chunk_text(d.text)) for d in corpus() if d.id in "ac"
        )
