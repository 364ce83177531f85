"""The LLM relevance judge on a RAG source, end to end: an OpenAI-compatible chat deployment played
by a real server on loopback, one batched call per resolve, the judge's order and scores, and the
``on_error`` paths (``skip`` keeps the recall order and is never cached; ``block`` fails the
source)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from tests.conftest import ApiClient
from tests.fake_models import chat_reply
from tests.loopback import Reply, Seen, Service, json_reply, running_service
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection, rag_route, resolve

QUESTION = "my headphones make a crackling sound, is that covered?"
DOCUMENTS = [
    *SUPPORT_DOCS,
    {
        "id": "exchange",
        "title": "Exchanges",
        "text": "Faulty headphones can be exchanged in store.",
    },
    {
        "id": "gift",
        "title": "Gift cards",
        "text": "Gift cards never expire and cannot be refunded.",
    },
]
TEXTS = {doc["id"]: doc["text"] for doc in DOCUMENTS}
JUDGE_SCORES = {  # what the model answers, by document title
    "Refund policy": 0.2,
    "Headphone warranty": 0.95,
    "Shipping": 0.05,
    "Exchanges": 0.7,
    "Gift cards": 0.4,
}
DOCUMENT_TAG = re.compile(r'<document index="(\d+)" title="([^"]*)">')


def prompt_of(seen: Seen) -> str:
    return seen.json["messages"][-1]["content"]


def titles_in(seen: Seen) -> list[str]:
    found = DOCUMENT_TAG.findall(prompt_of(seen))
    assert [int(index) for index, _ in found] == list(range(len(found)))
    return [title for _, title in found]


def judging(seen: Seen) -> Reply:
    """A well-behaved model: one score per document, in document order."""
    return chat_reply(json.dumps({"scores": [JUDGE_SCORES[t] for t in titles_in(seen)]}))


@pytest.fixture
def model() -> Iterator[Service]:
    with running_service() as service:
        service.responder = judging
        deployments = {
            "judge-llm": {
                "url": service.base,
                "model": "tiny-judge",
                "api_key": "judge-key",
                "timeout_ms": 1000,
            }
        }
        with override_settings(LLM_DEPLOYMENTS=deployments):
            yield service


@pytest.fixture
def kb(acme_api: ApiClient) -> str:
    make_collection(acme_api, "kb", [dict(doc) for doc in DOCUMENTS])
    return "kb"


def judged_route(
    api: ApiClient, name: str = "r", *, judge: dict[str, Any] | None = None, **source: Any
) -> None:
    match = {
        "recall": {"top_k": 5, "min_similarity": -1},
        "judge": {"deployment": "judge-llm", "top_k": 2, "min_score": 0.5, **(judge or {})},
    }
    source.setdefault("timeout_ms", 10_000)
    response = api.post("/api/v1/routes", rag_route(name, "kb", match=match, **source))
    assert response.status_code == 201, response.content


def post_resolve(api: ApiClient, route: str = "r") -> Any:
    return api.post(
        "/api/v1/resolve",
        {"route": route, "request": {"messages": [{"role": "user", "content": QUESTION}]}},
    )


def source_of(report: dict[str, Any]) -> dict[str, Any]:
    return report["sources"][0]


def kept_ids(source: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in source.get("candidates", []) if c["kept"]]


def recall_order(source: dict[str, Any]) -> list[str]:
    ranked = sorted(source["candidates"], key=lambda c: c["recall_rank"])
    return [c["document_id"] for c in ranked]


def system_prompt(report: dict[str, Any]) -> str:
    first = report["request"]["messages"][0]
    return first["content"] if first["role"] == "system" else ""


# --- a good answer --------------------------------------------------------------------------------


def test_llm_judge_keeps_in_its_order_with_one_batched_call(
    acme_api: ApiClient, kb: str, model: Service
) -> None:
    judged_route(acme_api)
    report = resolve(acme_api, "r", QUESTION)
    source = source_of(report)
    assert source["status"] == "ok"
    assert source["notes"]["judged"] is True and "judge_error" not in source["notes"]
    assert kept_ids(source) == ["warranty", "exchange"]  # the judge's order, its top 2 at ≥ 0.5
    by_id = {c["document_id"]: c for c in source["candidates"]}
    title_of = {doc["id"]: doc["title"] for doc in DOCUMENTS}
    assert {i: c["judge_score"] for i, c in by_id.items()} == {
        i: JUDGE_SCORES[title_of[i]] for i in by_id
    }
    assert by_id["gift"]["reason"] == by_id["refund"]["reason"] == "below_min_score"
    assert all(c["cosine"] is not None for c in by_id.values())
    items = [i for i in report["items"] if i["source"] == "docs"]
    assert [i["score"] for i in items] == [0.95, 0.7]
    system = system_prompt(report)
    assert system.index("[Document: Headphone warranty]") < system.index("[Document: Exchanges]")
    assert "Refund policy" not in system and "Gift cards" not in system

    [seen] = model.requests  # exactly one call for the whole candidate set
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == "Bearer judge-key"
    body = seen.json
    assert body["model"] == "tiny-judge" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    prompt = prompt_of(seen)
    assert f"Query: {QUESTION}" in prompt
    assert sorted(titles_in(seen)) == sorted(JUDGE_SCORES)  # every candidate, once each
    assert titles_in(seen) == [title_of[i] for i in recall_order(source)]  # sent in recall order
    assert all(prompt.count(text) == 1 for text in TEXTS.values())


def test_one_call_per_resolve_and_per_preview(acme_api: ApiClient, kb: str, model: Service) -> None:
    judged_route(acme_api)
    for _ in range(2):
        resolve(acme_api, "r", QUESTION)
    response = acme_api.post("/api/v1/plugins/context/preview", {"route": "r", "query": QUESTION})
    assert response.status_code == 200, response.content
    items = response.json()["sources"][0]["items"]
    assert [i["document_id"] for i in items if i["kept"]] == ["warranty", "exchange"]
    assert {i["document_id"]: i["judge_score"] for i in items}["warranty"] == 0.95
    assert model.hits == 3
    assert all(len(titles_in(seen)) == len(DOCUMENTS) for seen in model.requests)


def test_max_candidates_bounds_what_the_model_reads(
    acme_api: ApiClient, kb: str, model: Service
) -> None:
    judged_route(acme_api, judge={"max_candidates": 3, "top_k": 5, "min_score": 0.0})
    source = source_of(resolve(acme_api, "r", QUESTION))
    [seen] = model.requests
    assert len(titles_in(seen)) == 3
    first_three = recall_order(source)[:3]
    assert sorted(kept_ids(source)) == sorted(first_three)
    unread = [c for c in source["candidates"] if c["document_id"] not in first_three]
    assert len(unread) == 2
    assert all(c["reason"] == "not_judged" and c["judge_score"] is None for c in unread)


def test_a_good_judgement_is_cached(acme_api: ApiClient, kb: str, model: Service) -> None:
    judged_route(acme_api, cache_results=True)
    first = source_of(resolve(acme_api, "r", QUESTION))
    second = source_of(resolve(acme_api, "r", QUESTION))
    assert (first["notes"]["cache"], second["notes"]["cache"]) == ("miss", "hit")
    assert kept_ids(second) == kept_ids(first) == ["warranty", "exchange"]
    assert model.hits == 1


# --- a malformed answer, on_error: skip ------------------------------------------------------------

MALFORMED: dict[str, tuple[Reply, str]] = {
    "prose": (chat_reply("All of them look relevant to me."), "not JSON"),
    "fenced-prose": (chat_reply("```json\nsure, here you go\n```"), "not JSON"),
    "no-scores": (chat_reply('{"relevance": [1, 1, 1, 1, 1]}'), 'no "scores"'),
    "wrong-count": (chat_reply('{"scores": [0.9, 0.1]}'), "2 scores for 5 documents"),
    "out-of-range": (chat_reply('{"scores": [1.5, 0.2, 0.3, 0.4, 0.5]}'), "outside [0, 1]"),
    "not-a-number": (chat_reply('{"scores": ["high", 0.2, 0.3, 0.4, 0.5]}'), "not a number"),
    "no-choices": (json_reply({"choices": []}), "no choices"),
    "http-500": (json_reply({"error": {"message": "overloaded"}}, 500), "HTTP 500"),
    "timeout": (chat_reply('{"scores": [1, 1, 1, 1, 1]}', delay_s=5), "timed out after 1000 ms"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_answer_with_on_error_skip_keeps_the_recall_order_uncached(
    acme_api: ApiClient, kb: str, model: Service, case: str
) -> None:
    reply, message = MALFORMED[case]
    model.responder = lambda seen: reply
    judged_route(acme_api, cache_results=True)

    report = resolve(acme_api, "r", QUESTION)
    source = source_of(report)
    assert source["status"] == "ok"
    assert source["notes"]["judged"] is False
    assert message in source["notes"]["judge_error"]
    order = recall_order(source)
    assert kept_ids(source) == order[:2]  # judge top_k 2, in the recall order
    reasons = {c["document_id"]: c["reason"] for c in source["candidates"]}
    assert [reasons[i] for i in order] == ["judge_failed_recall_order"] * 2 + ["beyond_top_k"] * 3
    assert all(c["judge_score"] is None for c in source["candidates"])
    assert source["notes"]["cache"] == "miss"
    assert model.hits == 1

    again = source_of(resolve(acme_api, "r", QUESTION))
    assert again["notes"]["cache"] == "miss"  # unjudged documents serve one request only
    assert message in again["notes"]["judge_error"]
    assert model.hits == 2  # the model was asked again

    model.responder = judging  # the model recovers: its judgement is cached from now on
    judged = source_of(resolve(acme_api, "r", QUESTION))
    assert judged["notes"]["cache"] == "miss" and "judge_error" not in judged["notes"]
    assert kept_ids(judged) == ["warranty", "exchange"]
    cached = source_of(resolve(acme_api, "r", QUESTION))
    assert cached["notes"]["cache"] == "hit" and kept_ids(cached) == ["warranty", "exchange"]
    assert model.hits == 3


def test_unknown_deployment_is_refused_when_the_route_is_saved(
    acme_api: ApiClient, kb: str
) -> None:
    match = {"judge": {"deployment": "not-configured"}}
    response = acme_api.post("/api/v1/routes", rag_route("r", "kb", match=match))
    assert response.status_code == 400
    assert "unknown deployment 'not-configured'" in response.json()["error"]["message"]


def test_a_deployment_removed_after_saving_takes_the_on_error_path(
    acme_api: ApiClient, kb: str, model: Service
) -> None:
    with override_settings(
        LLM_DEPLOYMENTS={"not-configured": {"url": "http://127.0.0.1:9", "model": "m"}}
    ):
        judged_route(acme_api, judge={"deployment": "not-configured"})
    source = source_of(resolve(acme_api, "r", QUESTION))
    assert "unknown judge deployment 'not-configured'" in source["notes"]["judge_error"]
    assert kept_ids(source) == recall_order(source)[:2]
    assert model.hits == 0


# --- on_error: block -----------------------------------------------------------------------------


def test_on_error_block_fails_the_source(acme_api: ApiClient, kb: str, model: Service) -> None:
    model.responder = lambda seen: chat_reply("I cannot judge these documents.")
    judged_route(acme_api, judge={"on_error": "block"}, cache_results=True)
    report = resolve(acme_api, "r", QUESTION)  # on_failure skip: the request goes on without them
    source = source_of(report)
    assert source["status"] == "failed"
    assert "relevance judge failed" in source["error"] and "not JSON" in source["error"]
    assert report["request"]["messages"] == [{"role": "user", "content": QUESTION}]
    assert source_of(resolve(acme_api, "r", QUESTION))["status"] == "failed"  # nothing cached
    assert model.hits == 2
    preview = acme_api.post("/api/v1/plugins/context/preview", {"route": "r", "query": QUESTION})
    assert preview.json()["sources"][0]["status"] == "failed"


def test_on_error_block_with_on_failure_block_refuses_with_503(
    acme_api: ApiClient, kb: str, model: Service
) -> None:
    model.responder = lambda seen: chat_reply('{"scores": [0.5]}')
    judged_route(acme_api, judge={"on_error": "block"}, on_failure="block")
    response = post_resolve(acme_api)
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "source_failed" and "'docs' failed" in error["message"]
    assert model.hits == 1


def test_on_error_block_does_not_refuse_when_the_judge_answers(
    acme_api: ApiClient, kb: str, model: Service
) -> None:
    judged_route(acme_api, judge={"on_error": "block"}, on_failure="block")
    response = post_resolve(acme_api)
    assert response.status_code == 200, response.content
    assert kept_ids(source_of(response.json())) == ["warranty", "exchange"]
