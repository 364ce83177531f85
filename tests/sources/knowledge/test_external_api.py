"""The ``external_api`` RAG backend against a real search service on loopback, through resolve and
the context preview: the SSRF allow-list, the request template, the response mapping and the
score each kind of service returns, the response size limit, timeouts, redirects and the cache."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django_tenants.utils import get_public_schema_name, schema_context

from tenants.models import Tenant
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import (
    Reply,
    Seen,
    Service,
    json_reply,
    outbound_allowlist,
)
from tests.sources.knowledge.conftest import resolve

QUESTION = "can I return my headphones for a refund?"
RECALL_ALL = {"recall": {"top_k": 10, "min_similarity": -1}}

PINECONE = {
    "matches": [
        {
            "id": "refund",
            "score": 0.91,
            "metadata": {"title": "Refund policy", "text": "Returns within 30 days get a refund."},
        },
        {
            "id": "warranty",
            "score": 0.55,
            "metadata": {"title": "Warranty", "text": "Headphones have a two-year warranty."},
        },
        {
            "id": "shipping",
            "score": 0.12,
            "metadata": {"title": "Shipping", "text": "Standard shipping takes three days."},
        },
    ],
    "namespace": "support",
}
PINECONE_MAPPING = {
    "documents_path": "matches",
    "text_path": "metadata.text",
    "title_path": "metadata.title",
    "id_path": "id",
    "score": "pinecone",
}


def external_route(
    name: str, endpoint: str, *, config: dict[str, Any] | None = None, **source: Any
) -> dict[str, Any]:
    source.setdefault("timeout_ms", 10_000)
    return {
        "name": name,
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "search",
                    "backend": "external_api",
                    "backend_config": {"endpoint": endpoint, **(config or {})},
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def create_route(api: ApiClient, route: dict[str, Any]) -> None:
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def post_resolve(api: ApiClient, route: str, question: str = QUESTION) -> Any:
    return api.post(
        "/api/v1/resolve",
        {"route": route, "request": {"messages": [{"role": "user", "content": question}]}},
    )


def preview(api: ApiClient, route: str, query: str = QUESTION) -> dict[str, Any]:
    response = api.post("/api/v1/plugins/context/preview", {"route": route, "query": query})
    assert response.status_code == 200, response.content
    return response.json()["sources"][0]


def source_of(report: dict[str, Any]) -> dict[str, Any]:
    return report["sources"][0]


def kept_ids(source: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in source.get("candidates", []) if c["kept"]]


def system_prompt(report: dict[str, Any]) -> str:
    first = report["request"]["messages"][0]
    return first["content"] if first["role"] == "system" else ""


# --- (1) the outbound allow-list -----------------------------------------------------------------


@pytest.mark.parametrize("entry", ["127.0.0.1", "127.0.0.0/8"])
def test_loopback_service_is_refused_until_the_allowlist_names_it(
    acme: TenantFixture, acme_api: ApiClient, service: Service, entry: str
) -> None:
    with schema_context(get_public_schema_name()):
        assert Tenant.objects.get(schema_name=acme.schema).outbound_allowlist == []
    service.answer(PINECONE)
    config = {"response": PINECONE_MAPPING}
    create_route(
        acme_api, external_route("r", service.url("/query"), config=config, match=RECALL_ALL)
    )

    refused = resolve(acme_api, "r", QUESTION)  # 200: on_failure skip goes on without the documents
    source = source_of(refused)
    assert (source["status"], source["on_failure"]) == ("failed", "skip")
    assert "refused" in source["error"] and "loopback" in source["error"]
    assert "allow-list" in source["error"]
    assert refused["request"]["messages"] == [{"role": "user", "content": QUESTION}]
    previewed = preview(acme_api, "r")
    assert previewed["status"] == "failed" and "refused" in previewed["error"]
    assert previewed["items"] == []
    assert service.hits == 0  # refused before anything was sent

    with outbound_allowlist(acme.schema, [entry]):
        allowed = resolve(acme_api, "r", QUESTION)
        assert source_of(allowed)["status"] == "ok"
        assert kept_ids(source_of(allowed)) == ["refund", "warranty", "shipping"]
        assert "[Document: Refund policy] Returns within 30 days" in system_prompt(allowed)
        previewed = preview(acme_api, "r")
        assert previewed["status"] == "ok"
        assert [i["document_id"] for i in previewed["items"]] == ["refund", "warranty", "shipping"]
        assert previewed["items"][0]["recall_score"] == pytest.approx(0.91)
        assert service.hits == 2

    assert source_of(resolve(acme_api, "r", QUESTION))["status"] == "failed"  # restored: refused
    assert service.hits == 2


def test_another_tenants_allowlist_does_not_open_the_door(
    acme_api: ApiClient, globex: TenantFixture, service: Service
) -> None:
    service.answer(PINECONE)
    config = {"response": PINECONE_MAPPING}
    create_route(
        acme_api, external_route("r", service.url("/query"), config=config, match=RECALL_ALL)
    )
    with outbound_allowlist(globex.schema, ["127.0.0.1"]):
        source = source_of(resolve(acme_api, "r", QUESTION))
    assert source["status"] == "failed" and "refused" in source["error"]
    assert service.hits == 0


# --- (2) the request template ---------------------------------------------------------------------


def test_request_template_is_filled(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(PINECONE)
    question = 'refund for an "express" order, 30 days?'
    template = {
        "query": "{{query}}",
        "topK": "{{top_k}}",
        "filter": "{{filter}}",
        "includeMetadata": True,
        "namespace": "support",
        "prompt": "Find: {{query}} (k={{top_k}})",
        "queries": ["{{query}}"],
    }
    config = {
        "request_format": template,
        "headers": {"Authorization": "Bearer service-key", "X-Index": "support"},
        "response": PINECONE_MAPPING,
    }
    route = external_route(
        "r",
        service.url("/query"),
        config=config,
        match={"recall": {"top_k": 7, "min_similarity": 0.0}},
        filter={"topic": "billing", "lang": "en"},
    )
    create_route(acme_api, route)
    resolve(acme_api, "r", question)
    [seen] = service.requests
    assert (seen.method, seen.path) == ("POST", "/query")
    assert seen.headers["authorization"] == "Bearer service-key"
    assert seen.headers["x-index"] == "support"
    assert seen.headers["content-type"] == "application/json"
    assert seen.json == {
        "query": question,
        "topK": 7,  # a number, not "7"
        "filter": {"topic": "billing", "lang": "en"},
        "includeMetadata": True,
        "namespace": "support",
        "prompt": f"Find: {question} (k=7)",
        "queries": [question],
    }


def test_default_template_and_no_filter(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer([{"id": "a", "text": "some text"}])
    template = {"q": "{{query}}", "k": "{{top_k}}", "where": "{{filter}}"}
    create_route(acme_api, external_route("default", service.url("/search")))
    create_route(
        acme_api,
        external_route(
            "judged",
            service.url("/search"),
            config={"request_format": template},
            match={"judge": {"max_candidates": 12}},  # judge-only: recall as many as it may read
        ),
    )
    resolve(acme_api, "default", QUESTION)
    resolve(acme_api, "judged", QUESTION)
    default, judged = service.requests
    assert default.json == {"query": QUESTION, "top_k": 20}  # the default match block recalls 20
    assert judged.json == {"q": QUESTION, "k": 12, "where": {}}


def test_get_requests_send_the_template_as_query_parameters(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(PINECONE)
    config = {
        "method": "GET",
        "request_format": {"q": "{{query}}", "k": "{{top_k}}", "filter": "{{filter}}"},
        "response": PINECONE_MAPPING,
    }
    route = external_route(
        "r",
        service.url("/search"),
        config=config,
        match={"recall": {"top_k": 4, "min_similarity": 0.0}},
        filter={"topic": "billing"},
    )
    create_route(acme_api, route)
    assert source_of(resolve(acme_api, "r", QUESTION))["status"] == "ok"
    [seen] = service.requests
    url = urlsplit(seen.path)
    assert (seen.method, url.path, seen.raw) == ("GET", "/search", b"")
    params = parse_qs(url.query)
    assert params["q"] == [QUESTION] and params["k"] == ["4"]
    assert json.loads(params["filter"][0]) == {"topic": "billing"}


# --- (3) response mapping and scores ------------------------------------------------------------

MAPPINGS: dict[str, tuple[Any, dict[str, Any], list[tuple[str, str, float, float | None]]]] = {
    # name: (service answer, response mapping, expected [(id, title, recall score, cosine)])
    "pinecone": (
        PINECONE,
        PINECONE_MAPPING,
        [
            ("refund", "Refund policy", 0.91, 0.91),
            ("warranty", "Warranty", 0.55, 0.55),
            ("shipping", "Shipping", 0.12, 0.12),
        ],
    ),
    "weaviate": (
        {
            "data": {
                "Get": {
                    "Doc": [
                        {
                            "title": "Refund policy",
                            "text": "Returns within 30 days get a refund.",
                            "_additional": {"id": "w-1", "distance": 0.08},
                        },
                        {
                            "title": "Warranty",
                            "text": "Headphones have a two-year warranty.",
                            "_additional": {"id": "w-2", "distance": 0.35},
                        },
                    ]
                }
            }
        },
        {"documents_path": "data.Get.Doc", "id_path": "_additional.id", "score": "weaviate"},
        [("w-1", "Refund policy", 0.92, 0.92), ("w-2", "Warranty", 0.65, 0.65)],
    ),
    "custom": (
        {
            "result": {
                "items": [
                    {"key": "c-1", "body": "Returns within 30 days.", "rank": {"value": 0.73}},
                    {"key": "c-2", "body": "No score here."},  # missing: similarity 1
                ]
            }
        },
        {
            "documents_path": "result.items",
            "text_path": "body",
            "title_path": None,
            "id_path": "key",
            "score": "custom",
            "score_path": "rank.value",
        },
        [("c-1", "", 0.73, 0.73), ("c-2", "", 1.0, 1.0)],
    ),
    "none": (
        [
            {
                "id": "n-1",
                "title": "Refund policy",
                "text": "Returns within 30 days.",
                "score": 0.2,
            },
            {"id": "n-2", "title": "Warranty", "text": "Two-year warranty."},
        ],
        {},  # the body is the list; no score kind: every document counts as similarity 1
        [("n-1", "Refund policy", 1.0, 1.0), ("n-2", "Warranty", 1.0, 1.0)],
    ),
}


@pytest.mark.parametrize("kind", list(MAPPINGS))
def test_response_mapping_and_scores(
    allow_acme: None, acme_api: ApiClient, service: Service, kind: str
) -> None:
    answer, mapping, expected = MAPPINGS[kind]
    service.answer(answer)
    config = {"response": mapping}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=RECALL_ALL))
    report = resolve(acme_api, "r", QUESTION)
    candidates = source_of(report)["candidates"]
    got = [(c["document_id"], c["title"], c["recall_score"], c["cosine"]) for c in candidates]
    assert got == [(i, t, pytest.approx(s), pytest.approx(c)) for i, t, s, c in expected]
    assert all(c["bm25"] is None and c["kept"] and c["reason"] == "recalled" for c in candidates)
    items = [i for i in report["items"] if i["source"] == "search"]
    assert [i["score"] for i in items] == [pytest.approx(s) for _, _, s, _ in expected]
    _, first_title, _, _ = expected[0]
    prefix = f"[Document: {first_title}] " if first_title else ""
    assert prefix + "Returns within 30 days" in system_prompt(report)
    previewed = preview(acme_api, "r")
    assert [i["document_id"] for i in previewed["items"]] == [e[0] for e in expected]
    assert [i["recall_score"] for i in previewed["items"]] == [
        pytest.approx(e[2]) for e in expected
    ]


def test_elasticsearch_score_is_a_lexical_score(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(
        {
            "took": 3,
            "hits": {
                "total": {"value": 2},
                "hits": [
                    {
                        "_id": "es-1",
                        "_score": 7.25,
                        "_source": {"title": "Refund policy", "text": "Returns within 30 days."},
                    },
                    {
                        "_id": "es-2",
                        "_score": 0.4,
                        "_source": {"title": "Warranty", "text": "Two-year warranty."},
                    },
                ],
            },
        }
    )
    mapping = {
        "documents_path": "hits.hits",
        "text_path": "_source.text",
        "title_path": "_source.title",
        "id_path": "_id",
        "score": "elasticsearch",
    }
    route = external_route(
        "r",
        service.url("/support/_search"),
        config={"response": mapping},
        match={"recall": {"top_k": 10, "min_similarity": 0.5}},  # compared with the raw _score
    )
    create_route(acme_api, route)
    candidates = source_of(resolve(acme_api, "r", QUESTION))["candidates"]
    assert [(c["document_id"], c["title"]) for c in candidates] == [("es-1", "Refund policy")]
    assert candidates[0]["recall_score"] == pytest.approx(7.25)
    assert candidates[0]["bm25"] == pytest.approx(7.25) and candidates[0]["cosine"] is None


@pytest.mark.parametrize(
    ("kind", "min_similarity", "kept"),
    [
        ("pinecone", 0.5, ["refund", "warranty"]),
        ("pinecone", 0.95, []),
        ("weaviate", 0.7, ["w-1"]),  # 1 - 0.35 = 0.65 is below
        ("custom", 0.8, ["c-2"]),  # the unscored document counts as 1
    ],
)
def test_min_similarity_drops_low_scores(
    allow_acme: None,
    acme_api: ApiClient,
    service: Service,
    kind: str,
    min_similarity: float,
    kept: list[str],
) -> None:
    answer, mapping, _ = MAPPINGS[kind]
    service.answer(answer)
    match = {"recall": {"top_k": 10, "min_similarity": min_similarity}}
    create_route(
        acme_api, external_route("r", service.url("/q"), config={"response": mapping}, match=match)
    )
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert kept_ids(source) == kept
    assert source["status"] == ("ok" if kept else "empty")  # finding nothing is not a failure
    assert [i["document_id"] for i in preview(acme_api, "r")["items"]] == kept


def test_top_k_caps_what_the_service_returns(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(PINECONE)  # three matches although two were asked for
    match = {"recall": {"top_k": 2, "min_similarity": 0.0}}
    config = {"response": PINECONE_MAPPING}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=match))
    assert kept_ids(source_of(resolve(acme_api, "r", QUESTION))) == ["refund", "warranty"]


@pytest.mark.parametrize(
    ("answer", "mapping", "message"),
    [
        ({"matches": {"id": "x"}}, PINECONE_MAPPING, "matches is not a list"),
        ({"results": []}, PINECONE_MAPPING, "matches is not a list"),
        ("<html>", {}, "non-JSON"),
    ],
)
def test_unusable_answers_fail_the_source(
    allow_acme: None,
    acme_api: ApiClient,
    service: Service,
    answer: Any,
    mapping: dict[str, Any],
    message: str,
) -> None:
    if answer == "<html>":
        service.responder = lambda seen: Reply(body=b"<html>oops</html>", headers={})
    else:
        service.answer(answer)
    config = {"response": mapping}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=RECALL_ALL))
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert source["status"] == "failed" and message in source["error"]


def test_http_error_from_the_service_fails_the_source(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "index not found"}, status=404)
    create_route(acme_api, external_route("r", service.url("/q"), match=RECALL_ALL))
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert source["status"] == "failed" and "HTTP 404" in source["error"]


# --- (4) max_response_bytes ---------------------------------------------------------------------


def padded_answer(size: int) -> dict[str, Any]:
    return {"matches": [{"id": "big", "score": 0.9, "metadata": {"text": "x" * size}}]}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_max_response_bytes_fails_the_source(
    allow_acme: None, acme_api: ApiClient, service: Service, chunked: bool
) -> None:
    body = json.dumps(padded_answer(5000)).encode()
    service.responder = lambda seen: Reply(body=body, chunked=chunked)
    config = {"response": PINECONE_MAPPING, "max_response_bytes": 2048}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=RECALL_ALL))
    report = resolve(acme_api, "r", QUESTION)
    source = source_of(report)
    assert source["status"] == "failed"
    assert "more than 2048" in source["error"] and "127.0.0.1" in source["error"]
    assert "x" * 100 not in json.dumps(report)
    assert preview(acme_api, "r")["status"] == "failed"


@pytest.mark.parametrize("limit", [0, 8192], ids=["default-4MiB", "within"])
def test_a_body_within_max_response_bytes_is_used(
    allow_acme: None, acme_api: ApiClient, service: Service, limit: int
) -> None:
    service.answer(padded_answer(5000))
    config = {"response": PINECONE_MAPPING, "max_response_bytes": limit}
    route = external_route("r", service.url("/q"), config=config, match=RECALL_ALL)
    create_route(acme_api, route)
    assert kept_ids(source_of(resolve(acme_api, "r", QUESTION))) == ["big"]


def test_max_response_bytes_is_validated(acme_api: ApiClient) -> None:
    config = {"max_response_bytes": -1}
    response = acme_api.post(
        "/api/v1/routes", external_route("r", "http://127.0.0.1:9/", config=config)
    )
    assert response.status_code == 400
    assert "max_response_bytes" in response.json()["error"]["message"]


# --- (5) timeouts ---------------------------------------------------------------------------------


def test_backend_timeout_times_the_source_out_and_the_request_answers(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    """The backend's own timeout shortens the source's deadline: a source cut by it reports
    ``timeout`` (tests/sources/knowledge/test_deadlines.py holds the deadline's other cases)."""
    service.responder = lambda seen: json_reply(PINECONE, delay_s=5)
    config = {"response": PINECONE_MAPPING, "timeout_ms": 300}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=RECALL_ALL))
    started = time.monotonic()
    report = resolve(acme_api, "r", QUESTION)
    assert time.monotonic() - started < 4
    source = source_of(report)
    assert source["status"] == "timeout"
    assert "timed out after 300 ms" in source["error"]
    assert report["request"]["messages"] == [{"role": "user", "content": QUESTION}]


def test_source_timeout_marks_the_source_timed_out(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.responder = lambda seen: json_reply(PINECONE, delay_s=5)
    config = {"response": PINECONE_MAPPING, "timeout_ms": 20_000}
    route = external_route("r", service.url("/q"), config=config, match=RECALL_ALL, timeout_ms=300)
    create_route(acme_api, route)
    started = time.monotonic()
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert time.monotonic() - started < 4
    assert source["status"] == "timeout" and "timed out" in source["error"]


@pytest.mark.parametrize(
    ("backend_ms", "source_ms", "said"),
    [(300, 10_000, "timed out"), (20_000, 300, "timed out")],
    ids=["backend-timeout", "source-timeout"],
)
def test_timeout_with_on_failure_block_refuses_with_503(
    allow_acme: None,
    acme_api: ApiClient,
    service: Service,
    backend_ms: int,
    source_ms: int,
    said: str,
) -> None:
    service.responder = lambda seen: json_reply(PINECONE, delay_s=5)
    config = {"response": PINECONE_MAPPING, "timeout_ms": backend_ms}
    route = external_route(
        "r",
        service.url("/q"),
        config=config,
        match=RECALL_ALL,
        timeout_ms=source_ms,
        on_failure="block",
    )
    create_route(acme_api, route)
    response = post_resolve(acme_api, "r")
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "source_failed"
    assert f"'search' {said}" in error["message"] and "on_failure: block" in error["message"]


# --- (6) redirects ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["http://10.0.0.1/steal", "http://169.254.169.254/latest/meta-data/"]
)
def test_redirect_to_a_non_allowed_address_is_refused(
    allow_acme: None, acme_api: ApiClient, service: Service, location: str
) -> None:
    service.responder = lambda seen: Reply(status=307, body=b"", headers={"Location": location})
    config = {"response": PINECONE_MAPPING}
    create_route(acme_api, external_route("r", service.url("/q"), config=config, match=RECALL_ALL))
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert source["status"] == "failed"
    assert "refused" in source["error"] and "allow-list" in source["error"]
    assert [seen.path for seen in service.requests] == ["/q"]


def test_redirect_to_an_allowed_address_is_followed(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    def respond(seen: Seen) -> Reply:
        if seen.path == "/old":
            return Reply(status=307, body=b"", headers={"Location": "/new"})
        return json_reply(PINECONE)

    service.responder = respond
    config = {"response": PINECONE_MAPPING}
    create_route(
        acme_api, external_route("r", service.url("/old"), config=config, match=RECALL_ALL)
    )
    assert kept_ids(source_of(resolve(acme_api, "r", QUESTION)))[0] == "refund"
    assert [(s.method, s.path) for s in service.requests] == [("POST", "/old"), ("POST", "/new")]
    assert service.requests[1].json == {"query": QUESTION, "top_k": 10}


# --- (7) the cache ------------------------------------------------------------------------------------


def numbered_answers(service: Service) -> None:
    """The n-th request is answered with one document ``answer-n``."""

    def respond(seen: Seen) -> Reply:
        n = service.hits
        return json_reply(
            [{"id": f"answer-{n}", "title": f"Answer {n}", "text": f"Answer number {n}."}]
        )

    service.responder = respond


def test_cached_results_are_served_without_calling_the_service_and_never_cross_tenants(
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    service: Service,
) -> None:
    numbered_answers(service)
    route = external_route("r", service.url("/q"), match=RECALL_ALL, cache_results=True)
    create_route(acme_api, route)
    create_route(globex_api, route)  # the very same route, source and query in another tenant
    with (
        outbound_allowlist(acme.schema, ["127.0.0.1"]),
        outbound_allowlist(globex.schema, ["127.0.0.1"]),
    ):
        first = resolve(acme_api, "r", QUESTION)
        second = resolve(acme_api, "r", QUESTION)
        assert source_of(first)["notes"]["cache"] == "miss"
        assert source_of(second)["notes"]["cache"] == "hit"
        assert kept_ids(source_of(second)) == kept_ids(source_of(first)) == ["answer-1"]
        assert second["request"] == first["request"]
        assert "Answer number 1." in system_prompt(second)
        assert service.hits == 1

        other = resolve(globex_api, "r", QUESTION)
        assert source_of(other)["notes"]["cache"] == "miss"
        assert kept_ids(source_of(other)) == ["answer-2"]
        assert "Answer number 1." not in json.dumps(other)
        assert source_of(resolve(globex_api, "r", QUESTION))["notes"]["cache"] == "hit"
        assert service.hits == 2

        changed = resolve(acme_api, "r", QUESTION + " today")  # another query: another entry
        assert source_of(changed)["notes"]["cache"] == "miss"
        assert kept_ids(source_of(changed)) == ["answer-3"]
        assert preview(acme_api, "r")["notes"].get("cache") is None  # preview reads live
        assert service.hits == 4


@pytest.mark.parametrize(
    "failure",
    [
        json_reply({"error": "overloaded"}, status=503),
        json_reply({"unexpected": "shape"}),
        json_reply([], delay_s=3),
    ],
    ids=["http-503", "bad-shape", "timeout"],
)
def test_a_failed_retrieval_is_never_cached(
    allow_acme: None, acme_api: ApiClient, service: Service, failure: Reply
) -> None:
    good = json_reply(PINECONE)
    service.answer_in_turn(failure, good)
    config = {"response": PINECONE_MAPPING, "timeout_ms": 500}
    route = external_route(
        "r", service.url("/q"), config=config, match=RECALL_ALL, cache_results=True
    )
    create_route(acme_api, route)
    failed = source_of(resolve(acme_api, "r", QUESTION))
    assert failed["status"] in {"failed", "timeout"} and failed["notes"]["cache"] == "miss"
    retried = source_of(resolve(acme_api, "r", QUESTION))
    assert retried["status"] == "ok" and retried["notes"]["cache"] == "miss"
    assert kept_ids(retried) == ["refund", "warranty", "shipping"]
    cached = source_of(resolve(acme_api, "r", QUESTION))
    assert cached["notes"]["cache"] == "hit" and kept_ids(cached) == kept_ids(retried)
    assert service.hits == 2
