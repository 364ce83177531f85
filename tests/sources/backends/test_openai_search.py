"""The ``openai`` backend (OpenAI vector-store file search) against a search service on loopback
that answers in the documented shapes: the request (path, key, query, max_num_results, filters,
ranking_options), the answer mapped into hits (file_id, filename, score, attributes, content
texts), min_similarity, the outbound allow-list, an answer over 4 MiB, 401, and a service slower
than the source's deadline."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Reply, Seen, Service, json_reply, outbound_allowlist, running_service
from tests.sources.backends.conftest import backend_route, create, kept, resolve_source

KEY = "sk-proj-loopback-0123456789"
QUESTION = "can I return my headphones for a refund?"

PAGE = {
    "object": "vector_store.search_results.page",
    "search_query": [QUESTION],
    "data": [
        {
            "file_id": "file-refund",
            "filename": "refund-policy.md",
            "score": 0.91,
            "attributes": {"topic": "billing", "year": 2025},
            "content": [
                {"type": "text", "text": "Returns within 30 days get a full refund."},
                {"type": "text", "text": "Refunds go to the original payment method."},
            ],
        },
        {
            "file_id": "file-warranty",
            "filename": "warranty.md",
            "score": 0.62,
            "attributes": {"topic": "warranty"},
            "content": [{"type": "text", "text": "Headphones have a two-year warranty."}],
        },
        {
            "file_id": "file-shipping",
            "filename": "shipping.md",
            "score": 0.18,
            "attributes": {},
            "content": [{"type": "text", "text": "Standard shipping takes three days."}],
        },
    ],
    "has_more": False,
    "next_page": None,
}


@pytest.fixture
def service(acme: TenantFixture) -> Iterator[Service]:
    with running_service() as running, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        running.answer(PAGE)
        yield running


def openai_route(service: Service, name: str = "r", **config: Any) -> dict[str, Any]:
    source = config.pop("source", {})
    source.setdefault("match", {"recall": {"top_k": 10, "min_similarity": -1}})
    return backend_route(
        name,
        "openai",
        {"vector_store_id": "vs_abc123", "api_key": KEY, "base_url": service.url("/v1"), **config},
        **source,
    )


def test_the_documented_request_and_answer(acme_api: ApiClient, service: Service) -> None:
    recall = {"recall": {"top_k": 5, "min_similarity": 0.3}}
    create(
        acme_api, openai_route(service, source={"match": recall, "filter": {"topic": "billing"}})
    )
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "r", "request": {"messages": [{"role": "user", "content": QUESTION}]}},
    )
    assert response.status_code == 200, response.content
    report = response.json()
    source = report["sources"][0]
    assert source["status"] == "ok", source

    seen = service.requests[-1]
    assert (seen.method, seen.path) == ("POST", "/v1/vector_stores/vs_abc123/search")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "query": QUESTION,
        "max_num_results": 5,
        "rewrite_query": False,
        "filters": {"type": "eq", "key": "topic", "value": "billing"},
        "ranking_options": {"score_threshold": 0.3},
    }
    assert kept(source) == ["file-refund", "file-warranty"]  # 0.18 is under min_similarity
    candidate = source["candidates"][0]
    assert (candidate["title"], candidate["cosine"]) == ("refund-policy.md", 0.91)
    prompt = report["request"]["messages"][0]["content"]
    assert "[Document: refund-policy.md] Returns within 30 days get a full refund." in prompt
    assert "Refunds go to the original payment method." in prompt


def test_several_filter_keys_and_max_num_results(acme_api: ApiClient, service: Service) -> None:
    config = {"max_num_results": 2, "ranker": "auto", "rewrite_query": True}
    source = {"filter": {"topic": "billing", "year": 2025}}
    create(acme_api, openai_route(service, **config, source=source))
    assert resolve_source(acme_api, "r", QUESTION)["status"] == "ok"
    body = service.requests[-1].body
    assert body["max_num_results"] == 2 and body["rewrite_query"] is True
    assert body["ranking_options"] == {"ranker": "auto"}
    assert body["filters"]["type"] == "and"
    assert sorted(body["filters"]["filters"], key=lambda f: f["key"]) == [
        {"type": "eq", "key": "topic", "value": "billing"},
        {"type": "eq", "key": "year", "value": 2025},
    ]  # in the stored filter's order (PostgreSQL orders a JSON object's keys)


def test_results_without_text_are_skipped_and_a_bad_page_fails(
    acme_api: ApiClient, service: Service
) -> None:
    page = {**PAGE, "data": [{"file_id": "f", "score": 0.9, "content": []}, *PAGE["data"][:1]]}
    service.answer(page)
    create(acme_api, openai_route(service))
    assert kept(resolve_source(acme_api, "r", QUESTION)) == ["file-refund"]
    service.answer({"object": "error"})
    failed = resolve_source(acme_api, "r", QUESTION)
    assert failed["status"] == "failed" and "no data list" in failed["error"]


def test_an_answer_over_4_mib_is_refused(acme_api: ApiClient, service: Service) -> None:
    text = "x" * (4 * 1024 * 1024)
    big = {**PAGE, "data": [{**PAGE["data"][0], "content": [{"type": "text", "text": text}]}]}
    for chunked in (False, True):  # declared length, and a body that only grows
        service.responder = lambda seen, chunked=chunked: Reply(
            body=json.dumps(big).encode(), chunked=chunked
        )
        create(acme_api, openai_route(service, f"big{int(chunked)}"))
        source = resolve_source(acme_api, f"big{int(chunked)}", QUESTION)
        assert source["status"] == "failed"
        assert f"more than {4 * 1024 * 1024}" in source["error"]


def test_a_rejected_key_fails_the_source_without_showing_it(
    acme_api: ApiClient, service: Service
) -> None:
    def unauthorized(seen: Seen) -> Reply:
        message = f"Incorrect API key provided: {KEY}."
        return json_reply({"error": {"message": message, "code": "invalid_api_key"}}, 401)

    service.responder = unauthorized
    create(acme_api, openai_route(service, source={"on_failure": "block"}))
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "r", "request": {"messages": [{"role": "user", "content": QUESTION}]}},
    )
    assert response.status_code == 503 and KEY not in response.content.decode()
    replay_id = re.search(r"rsv_[0-9a-f]+", response.json()["error"]["message"]).group(0)
    record = acme_api.get(f"/api/v1/replay/{replay_id}")
    assert record.status_code == 200, record.content
    failed = record.json()["sources"][0]
    assert failed["status"] == "failed" and "HTTP 401" in failed["error"]
    assert KEY not in json.dumps(record.json())


def test_a_slow_service_times_out_at_the_source_deadline(
    acme_api: ApiClient, service: Service
) -> None:
    service.responder = lambda seen: Reply(body=json.dumps(PAGE).encode(), delay_s=5)
    create(acme_api, openai_route(service, source={"timeout_ms": 300}))
    source = resolve_source(acme_api, "r", QUESTION)
    assert source["status"] == "timeout", source
    create(acme_api, openai_route(service, "own", timeout_ms=200, source={"timeout_ms": 3000}))
    own = resolve_source(acme_api, "own", QUESTION)
    assert own["status"] == "timeout" and "timed out after 200 ms" in own["error"]


def test_loopback_is_refused_until_the_allowlist_names_it(acme_api: ApiClient) -> None:
    with running_service() as service:
        create(acme_api, openai_route(service))
        source = resolve_source(acme_api, "r", QUESTION)
        assert source["status"] == "failed" and "allow-list" in source["error"]
        assert service.hits == 0


def test_nested_filters_are_refused_for_file_attributes(
    acme_api: ApiClient, service: Service
) -> None:
    create(acme_api, openai_route(service, source={"filter": {"tags": ["a", "b"]}}))
    source = resolve_source(acme_api, "r", QUESTION)
    assert source["status"] == "failed" and "flat strings" in source["error"]
    assert service.hits == 0


@pytest.mark.parametrize(
    "config",
    [
        {"vector_store_id": "../files"},
        {"vector_store_id": "vs_1", "base_url": "ftp://x"},
        {"vector_store_id": "vs_1", "max_num_results": 51},
    ],
)
def test_bad_settings_are_refused(acme_api: ApiClient, config: dict[str, Any]) -> None:
    route = backend_route("r", "openai", config)
    assert acme_api.post("/api/v1/routes", route).status_code == 400
