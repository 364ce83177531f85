"""A rag recall that writes no ``min_similarity`` cuts at its embedder's default, where the scores
are that embedder's cosines (vectorstore, milvus, qdrant); an external service's scores are its own
model's, so it gets the platform's generic 0.3; a written value wins; the report, the replay record
and the preview say which applied and from where. Real PostgreSQL, the real local embedder, a real
search service on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from sources.embedding import LOCAL_DEFAULTS, LOCAL_IDENTITY
from tests.conftest import ApiClient
from tests.loopback import Service
from tests.sources.knowledge.conftest import make_collection, rag_route, resolve

QUESTION = "can I return my headphones for a refund?"
EXTERNAL_DOCS = [
    {
        "id": "ext-returns",
        "title": "Returns",
        "text": "Returns are free for 60 days.",
        "score": 0.9,
    },
    {"id": "ext-cards", "title": "Cards", "text": "Card refunds take five days.", "score": 0.2},
]


def recall_notes(notes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in notes.items() if k.startswith(("min_similarity", "top_k", "embedder"))}


EMBEDDER_DEFAULT = {
    "min_similarity": LOCAL_DEFAULTS.rag_min_similarity,
    "min_similarity_from": "embedder",
    "top_k": 20,
    "top_k_from": "platform",
    "embedder": LOCAL_IDENTITY,
    "embedder_defaults": LOCAL_DEFAULTS.origin,
}


def external_source(service: Service) -> dict[str, Any]:
    return {
        "type": "rag",
        "name": "docs",
        "backend": "external_api",
        "backend_config": {
            "endpoint": service.url("/search"),
            "response": {"score": "custom", "score_path": "score"},
        },
        "match": {"recall": {}},  # recall only, nothing written
        "timeout_ms": 10_000,
    }


def test_the_collections_recall_cuts_at_the_embedders_default(
    acme_api: ApiClient, support_docs: list[dict[str, Any]]
) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post("/api/v1/routes", rag_route("r", "kb"))  # no match block: the default
    report = resolve(acme_api, "r", QUESTION)
    source = report["sources"][0]
    assert recall_notes(source["notes"]) == EMBEDDER_DEFAULT
    threshold = LOCAL_DEFAULTS.rag_min_similarity
    assert all(c["cosine"] >= threshold for c in source["candidates"])  # the cut that applied

    record = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert recall_notes(record["sources"][0]["notes"]) == EMBEDDER_DEFAULT
    preview = acme_api.post(
        "/api/v1/plugins/context/preview", {"route": "r", "query": QUESTION}
    ).json()["sources"][0]
    assert recall_notes(preview["notes"]) == EMBEDDER_DEFAULT


def test_a_written_threshold_wins(acme_api: ApiClient, support_docs: list[dict[str, Any]]) -> None:
    make_collection(acme_api, "kb", support_docs)
    match = {"recall": {"top_k": 2, "min_similarity": -1}}
    acme_api.post("/api/v1/routes", rag_route("r", "kb", match=match))
    source = resolve(acme_api, "r", QUESTION)["sources"][0]
    assert recall_notes(source["notes"]) == {
        "min_similarity": -1,
        "min_similarity_from": "route",
        "top_k": 2,
        "top_k_from": "route",
        "embedder": LOCAL_IDENTITY,
    }
    assert len(source["candidates"]) == 2  # every document is above -1: the written cut ran


@pytest.mark.usefixtures("allow_acme")
def test_an_external_service_gets_the_platform_threshold(
    acme_api: ApiClient, service: Service
) -> None:
    service.answer(EXTERNAL_DOCS)
    route = {"name": "ext", "context": {"sources": [external_source(service)]}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    source = resolve(acme_api, "ext", QUESTION)["sources"][0]
    assert recall_notes(source["notes"]) == {
        "min_similarity": 0.3,
        "min_similarity_from": "platform",
        "top_k": 20,
        "top_k_from": "platform",
    }
    kept = [c["document_id"] for c in source["candidates"] if c["kept"]]
    assert kept == ["ext-returns"]  # the service's 0.2 is below the platform's 0.3


@pytest.mark.usefixtures("allow_acme")
def test_a_hybrid_backend_says_the_threshold_of_the_side_that_answered(
    acme_api: ApiClient, service: Service, support_docs: list[dict[str, Any]]
) -> None:
    make_collection(acme_api, "kb", support_docs)
    service.answer({"error": "down"}, status=500)
    source = external_source(service)
    source.update(
        backend="hybrid",
        backend_config={
            "primary": {"backend": "external_api", "backend_config": source["backend_config"]},
            "fallback": {"backend": "vectorstore", "backend_config": {"collection": "kb"}},
        },
    )
    route = {"name": "h", "context": {"sources": [source]}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    notes = resolve(acme_api, "h", QUESTION)["sources"][0]["notes"]
    assert notes["served_by"] == "fallback"
    assert recall_notes(notes) == EMBEDDER_DEFAULT
