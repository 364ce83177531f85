"""The ``hybrid`` RAG backend: a primary and a fallback, one an external search service on
loopback and the other the tenant's own collection, in both orders and both strategies.

``sequential`` asks the fallback only after the primary fails or finds nothing; ``parallel`` starts
both and answers with the primary's documents whenever it has any, else the fallback's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ApiClient
from tests.loopback import (
    Reply,
    Service,
    json_reply,
    running_service,
)
from tests.sources.knowledge.conftest import make_collection, resolve
from tests.unchecked_routes import save_unchecked

QUESTION = "how many days do I have to return a product for a refund?"
MATCH = {"recall": {"top_k": 5, "min_similarity": 0.1}}
EXTERNAL_DOCS = [
    {
        "id": "ext-returns",
        "title": "Returns (search service)",
        "text": "Returns are free for 60 days.",
    },
    {"id": "ext-cards", "title": "Card refunds", "text": "Card refunds take five business days."},
]
EXTERNAL_IDS = ["ext-returns", "ext-cards"]


@pytest.fixture
def second_service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture
def kb(acme_api: ApiClient, support_docs: list[dict[str, Any]]) -> str:
    make_collection(acme_api, "kb", support_docs)
    created = acme_api.post("/api/v1/collections", {"name": "empty"})
    assert created.status_code == 201, created.content
    return "kb"


def external(service: Service, **config: Any) -> dict[str, Any]:
    return {
        "backend": "external_api",
        "backend_config": {"endpoint": service.url("/search"), **config},
    }


def vectorstore(collection: str) -> dict[str, Any]:
    return {"backend": "vectorstore", "backend_config": {"collection": collection}}


MISSING = {"collection": "missing"}


def hybrid_route(
    api: ApiClient,
    primary: dict[str, Any],
    fallback: dict[str, Any] | None,
    strategy: str,
    **source: Any,
) -> None:
    config: dict[str, Any] = {"primary": primary, "strategy": strategy}
    if fallback is not None:
        config["fallback"] = fallback
    route = {
        "name": "r",
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "docs",
                    "backend": "hybrid",
                    "backend_config": config,
                    "match": MATCH,
                    "timeout_ms": 10_000,
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }
    if MISSING in (primary.get("backend_config"), (fallback or {}).get("backend_config")):
        save_unchecked("acme", route)  # a collection removed after the route was saved
        return
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def retrieve(api: ApiClient) -> tuple[dict[str, Any], list[str]]:
    source = resolve(api, "r", QUESTION)["sources"][0]
    return source, [c["document_id"] for c in source.get("candidates", []) if c["kept"]]


def is_support_doc(document_id: str) -> bool:
    return document_id in {"refund", "warranty", "shipping"}


FAILURES: dict[str, Reply] = {
    "http-500": json_reply({"error": "down"}, status=500),
    "bad-shape": json_reply({"unexpected": True}),
    "timeout": json_reply(EXTERNAL_DOCS, delay_s=5),
}
FAILURE_MESSAGES = {
    "http-500": "HTTP 500",
    "bad-shape": "not a list",
    "timeout": "timed out after 300 ms",
}


# --- primary: the external service; fallback: the tenant's collection -----------------------------


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
def test_primary_with_documents_answers(
    allow_acme: None, acme_api: ApiClient, kb: str, service: Service, strategy: str
) -> None:
    service.answer(EXTERNAL_DOCS)
    hybrid_route(acme_api, external(service), vectorstore(kb), strategy)
    source, kept = retrieve(acme_api)
    assert source["status"] == "ok"
    assert kept == EXTERNAL_IDS
    assert source["notes"]["served_by"] == "primary"
    assert "primary_error" not in source["notes"]
    assert service.hits == 1


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_failing_primary_falls_back(
    allow_acme: None,
    acme_api: ApiClient,
    kb: str,
    service: Service,
    strategy: str,
    failure: str,
) -> None:
    reply = FAILURES[failure]
    service.responder = lambda seen: reply
    hybrid_route(acme_api, external(service, timeout_ms=300), vectorstore(kb), strategy)
    source, kept = retrieve(acme_api)
    assert source["status"] == "ok"
    assert kept and all(is_support_doc(d) for d in kept)
    assert kept[0] == "refund"
    assert source["notes"]["served_by"] == "fallback"
    assert FAILURE_MESSAGES[failure] in source["notes"]["primary_error"]
    assert service.hits == 1


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
def test_primary_without_documents_falls_back(
    allow_acme: None, acme_api: ApiClient, kb: str, service: Service, strategy: str
) -> None:
    service.answer([])
    hybrid_route(acme_api, external(service), vectorstore(kb), strategy)
    source, kept = retrieve(acme_api)
    assert kept[0] == "refund" and all(is_support_doc(d) for d in kept)
    assert source["notes"]["served_by"] == "fallback"
    assert "primary_error" not in source["notes"]  # finding nothing is not an error
    assert service.hits == 1


def test_primary_refused_by_the_allowlist_falls_back(
    acme_api: ApiClient, kb: str, service: Service
) -> None:
    service.answer(EXTERNAL_DOCS)
    hybrid_route(acme_api, external(service), vectorstore(kb), "sequential")
    source, kept = retrieve(acme_api)
    assert kept[0] == "refund"
    assert source["notes"]["served_by"] == "fallback"
    assert "refused" in source["notes"]["primary_error"]
    assert service.hits == 0


def test_both_failing_fails_the_source(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "down"}, status=500)
    hybrid_route(acme_api, external(service), vectorstore("missing"), "sequential")
    source, _ = retrieve(acme_api)
    assert source["status"] == "failed"
    assert "unknown collection" in source["error"]
    assert "HTTP 500" in source["notes"]["primary_error"]
    assert service.hits == 1


def test_both_failing_with_on_failure_block_refuses(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "down"}, status=500)
    hybrid_route(
        acme_api, external(service), vectorstore("missing"), "parallel", on_failure="block"
    )
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "r", "request": {"messages": [{"role": "user", "content": QUESTION}]}},
    )
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "source_failed"


# --- primary: the tenant's collection; fallback: the external service -----------------------------


def test_sequential_collection_with_documents_never_calls_the_service(
    allow_acme: None, acme_api: ApiClient, kb: str, service: Service
) -> None:
    service.answer(EXTERNAL_DOCS)
    hybrid_route(acme_api, vectorstore(kb), external(service), "sequential")
    source, kept = retrieve(acme_api)
    assert kept[0] == "refund" and all(is_support_doc(d) for d in kept)
    assert source["notes"]["served_by"] == "primary"
    assert service.hits == 0


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
@pytest.mark.parametrize("collection", ["empty", "missing"])
def test_empty_or_failing_collection_falls_back_to_the_service(
    allow_acme: None,
    acme_api: ApiClient,
    kb: str,
    service: Service,
    strategy: str,
    collection: str,
) -> None:
    service.answer(EXTERNAL_DOCS)
    hybrid_route(acme_api, vectorstore(collection), external(service), strategy)
    source, kept = retrieve(acme_api)
    assert kept == EXTERNAL_IDS
    assert source["notes"]["served_by"] == "fallback"
    if collection == "missing":
        assert "unknown collection" in source["notes"]["primary_error"]
    else:
        assert "primary_error" not in source["notes"]
    assert service.hits == 1
    assert service.requests[0].json == {"query": QUESTION, "top_k": 5}


def test_parallel_collection_with_documents_wins_over_the_service(
    allow_acme: None, acme_api: ApiClient, kb: str, service: Service
) -> None:
    service.answer(EXTERNAL_DOCS)
    hybrid_route(acme_api, vectorstore(kb), external(service), "parallel")
    source, kept = retrieve(acme_api)
    assert kept[0] == "refund" and all(is_support_doc(d) for d in kept)
    assert source["notes"]["served_by"] == "primary"
    assert service.hits <= 1  # started alongside, its answer unused


def test_parallel_ignores_a_failing_fallback_when_the_primary_has_documents(
    allow_acme: None, acme_api: ApiClient, kb: str, service: Service
) -> None:
    service.answer({"error": "down"}, status=500)
    hybrid_route(acme_api, vectorstore(kb), external(service), "parallel")
    source, kept = retrieve(acme_api)
    assert source["status"] == "ok" and kept[0] == "refund"
    assert source["notes"]["served_by"] == "primary"
    assert "primary_error" not in source["notes"]


# --- two external services: what each strategy asks -----------------------------------------------


@pytest.mark.parametrize(("strategy", "fallback_hits"), [("sequential", 0), ("parallel", 1)])
def test_parallel_starts_both_and_sequential_only_the_primary(
    allow_acme: None,
    acme_api: ApiClient,
    service: Service,
    second_service: Service,
    strategy: str,
    fallback_hits: int,
) -> None:
    # The primary answers late: a parallel fallback has long been asked (and has answered).
    service.responder = lambda seen: json_reply(EXTERNAL_DOCS, delay_s=0.5)
    second_service.answer([{"id": "fallback-doc", "text": "From the fallback service."}])
    hybrid_route(acme_api, external(service), external(second_service), strategy)
    source, kept = retrieve(acme_api)
    assert kept == EXTERNAL_IDS
    assert source["notes"]["served_by"] == "primary"
    assert (service.hits, second_service.hits) == (1, fallback_hits)


def test_parallel_with_a_late_empty_primary_uses_the_fallback(
    allow_acme: None, acme_api: ApiClient, service: Service, second_service: Service
) -> None:
    service.responder = lambda seen: json_reply([], delay_s=0.5)
    second_service.answer([{"id": "fallback-doc", "text": "From the fallback service."}])
    hybrid_route(acme_api, external(service), external(second_service), "parallel")
    source, kept = retrieve(acme_api)
    assert kept == ["fallback-doc"]
    assert source["notes"]["served_by"] == "fallback"
    assert (service.hits, second_service.hits) == (1, 1)


def test_without_a_fallback_the_primary_alone_answers(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "down"}, status=500)
    hybrid_route(acme_api, external(service), None, "sequential")
    source, _ = retrieve(acme_api)
    assert source["status"] == "failed" and "HTTP 500" in source["error"]
    service.answer(EXTERNAL_DOCS)
    source, kept = retrieve(acme_api)
    assert kept == EXTERNAL_IDS and source["notes"]["served_by"] == "primary"
