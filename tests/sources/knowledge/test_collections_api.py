"""Collections, documents and ingestion jobs through the API, on real PostgreSQL + pgvector."""

from __future__ import annotations

from typing import Any

from django.test import override_settings
from django_tenants.utils import schema_context

from sources.models import Chunk, Document
from tests.conftest import ApiClient
from tests.sources.knowledge.conftest import make_collection


def chunk_texts(schema: str, collection: str) -> list[str]:
    with schema_context(schema):
        return list(
            Chunk.objects.filter(collection__name=collection).values_list("text", flat=True)
        )


def test_ingestion_chunks_embeds_and_reports_progress(
    acme_api: ApiClient, acme: Any, support_docs: list
) -> None:
    job = make_collection(acme_api, "kb", support_docs)
    assert job["progress"] == 1.0 and job["processed"] == 3 and job["chunks_written"] == 3
    with schema_context(acme.schema):
        chunk = Chunk.objects.get(document__external_id="warranty")
        assert len(chunk.embedding) == 384
        assert chunk.title == "Headphone warranty"
        assert chunk.metadata == {"topic": "warranty", "document_id": "warranty"}
        assert chunk.search_vector is not None
    listing = acme_api.get("/api/v1/collections").json()["data"]
    assert [(c["name"], c["documents"], c["chunks"]) for c in listing] == [("kb", 3, 3)]
    assert listing[0]["embedder"] == "local:all-MiniLM-L6-v2:int8"


def test_long_documents_are_chunked_by_sentences_with_overlap(
    acme_api: ApiClient, acme: Any
) -> None:
    text = " ".join(f"Fact number {i} is about turbine blade number {i}." for i in range(120))
    make_collection(acme_api, "long", [{"id": "manual", "title": "Manual", "text": text}])
    texts = chunk_texts(acme.schema, "long")
    assert len(texts) > 1
    assert all(len(t.split()) <= 200 for t in texts)
    first_end = texts[0].rsplit("Fact number", 1)[1]
    assert first_end.strip() in texts[1]  # the last sentence of a chunk opens the next


def test_reposting_an_id_replaces_its_chunks(
    acme_api: ApiClient, acme: Any, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    new = {
        "id": "refund",
        "title": "Refund policy",
        "text": "Refunds are now possible within 60 days.",
    }
    response = acme_api.post("/api/v1/collections/kb/documents", {"documents": [new]})
    assert acme_api.get(f"/api/v1/jobs/{response.json()['job']}").json()["status"] == "done"
    texts = chunk_texts(acme.schema, "kb")
    assert "Refunds are now possible within 60 days." in texts
    assert not any("30 days" in t for t in texts)
    assert len(texts) == 3


def test_deleting_a_document_removes_its_chunks(
    acme_api: ApiClient, acme: Any, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    assert acme_api.delete("/api/v1/collections/kb/documents/shipping").json() == {"deleted": 1}
    assert not any("shipping" in t.lower() for t in chunk_texts(acme.schema, "kb"))
    assert acme_api.delete("/api/v1/collections/kb/documents/shipping").status_code == 404
    ids = [d["id"] for d in acme_api.get("/api/v1/collections/kb/documents").json()["data"]]
    assert ids == ["refund", "warranty"]


def test_document_listing_paginates(acme_api: ApiClient, support_docs: list) -> None:
    make_collection(acme_api, "kb", support_docs)
    first = acme_api.get("/api/v1/collections/kb/documents", {"limit": 2}).json()
    second = acme_api.get(
        "/api/v1/collections/kb/documents", {"limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert [d["id"] for d in first["data"] + second["data"]] == ["refund", "shipping", "warranty"]
    assert second["next_cursor"] is None


def test_bad_documents_are_refused_with_the_envelope(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/collections", {"name": "kb"}).status_code == 201
    cases = [
        ({"documents": []}, "documents"),
        ({"documents": [{"id": "a"}]}, "documents[0].text"),
        ({"documents": [{"id": "a", "text": "   "}]}, "documents[0].text"),
        ({"documents": [{"id": "a", "text": "x", "colour": 1}]}, "documents[0].colour"),
        ({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "documents"),
        ({"documents": [{"id": "a", "text": "x", "metadata": "nope"}]}, "documents[0].metadata"),
    ]
    for body, param in cases:
        response = acme_api.post("/api/v1/collections/kb/documents", body)
        assert response.status_code == 400, body
        assert response.json()["error"]["param"] == param, response.json()
    with override_settings(KNOWLEDGE_MAX_DOCUMENT_CHARS=10):
        response = acme_api.post(
            "/api/v1/collections/kb/documents", {"documents": [{"id": "a", "text": "x" * 11}]}
        )
    assert response.status_code == 400
    assert "limit is 10" in response.json()["error"]["message"]
    assert (
        acme_api.post(
            "/api/v1/collections/missing/documents", {"documents": [{"id": "a", "text": "x"}]}
        ).status_code
        == 404
    )
    assert acme_api.post("/api/v1/collections", {"name": "kb"}).status_code == 409
    assert acme_api.get("/api/v1/jobs/job_nope").status_code == 404


def test_ingest_scope_is_required(acme: Any) -> None:
    from tenants.services import issue_api_key

    narrow = ApiClient(issue_api_key(tenant=acme.tenant, scopes="resolve").plain_key)
    response = narrow.post("/api/v1/collections", {"name": "kb"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_a_collection_refuses_another_embedder(
    acme_api: ApiClient, acme: Any, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    with schema_context(acme.schema):
        from sources.models import Collection

        Collection.objects.filter(name="kb").update(embedder="remote:other-model@example")
    response = acme_api.post("/api/v1/collections/kb/documents", {"documents": [support_docs[0]]})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "embedder_mismatch"
    with schema_context(acme.schema):
        assert Document.objects.filter(collection__name="kb").count() == 3
