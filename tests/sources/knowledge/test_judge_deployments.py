"""The relevance judge asking a tenant's deployment, end to end through resolve, against the
loopback upstream (``tests/upstream.py``, a real HTTP server speaking OpenAI and Anthropic):

* a deployment named as ``match.judge.deployment`` is called in its own protocol, with its key in
  that protocol's header, once per judged stage with every candidate in one batch, and its scores
  decide what is kept; it wins over a platform deployment (``LLM_DEPLOYMENTS``) of the same name;
* a judge block naming no deployment asks the route's upstream deployment when it may judge; a
  deployment with ``may_judge: false``, ``deployment: local`` or a route without an upstream keep
  the local judge (no call reaches the upstream);
* the replay record (API and admin page) and the preview say which judge ran, and whether it fell
  back to the recall order;
* a deployment on loopback is refused by the outbound guard unless the tenant's allow-list names
  it; names are checked when the route is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from contextplatform.replay.models import ReplayRecord
from tests.admin.conftest import ACME_HOST, make_user, signed_in
from tests.conftest import ApiClient, TenantFixture, admin_object_url
from tests.fake_models import chat_reply
from tests.loopback import LOOPBACK, outbound_allowlist, running_service
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection, rag_route, resolve
from tests.upstream import ANTHROPIC_PATH, LoopbackUpstream, running_upstream

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
TITLE_OF = {doc["id"]: doc["title"] for doc in DOCUMENTS}
JUDGE_SCORES = {  # what the deployment answers, by document title
    "Refund policy": 0.2,
    "Headphone warranty": 0.95,
    "Shipping": 0.05,
    "Exchanges": 0.7,
    "Gift cards": 0.4,
}
MEMORIES = [
    "User owns noise-cancelling headphones bought in March.",
    "User prefers window seats on flights.",
    "User's favourite colour is green.",
]
KEYS = {"openai": "sk-judge-openai-" + "1" * 20, "anthropic": "sk-ant-judge-" + "2" * 20}
DOCUMENT = re.compile(r'<document index="(\d+)"(?: title="([^"]*)")?>\n(.*?)\n</document>', re.S)


def prompt_of(body: dict[str, Any]) -> str:
    """The judge's batch prompt: the last user message, in either protocol."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"])


def documents_in(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, text) of each document the prompt holds, checked to be numbered 0, 1, ..."""
    found = DOCUMENT.findall(prompt_of(body))
    assert [int(index) for index, _, _ in found] == list(range(len(found)))
    return [(title, text) for _, title, text in found]


def score_of(title: str, text: str) -> float:
    if title:
        return JUDGE_SCORES[title]
    return 0.9 if "headphones" in text else 0.1  # a memory: no title


def judging(body: dict[str, Any]) -> str:
    """A well-behaved deployment: one score per document, in document order."""
    return json.dumps({"scores": [score_of(t, x) for t, x in documents_in(body)]})


@pytest.fixture
def upstream() -> Iterator[LoopbackUpstream]:
    with running_upstream() as running:
        running.answer_with(judging)
        yield running


@pytest.fixture
def kb(acme_api: ApiClient) -> str:
    make_collection(acme_api, "kb", [dict(doc) for doc in DOCUMENTS])
    return "kb"


def create_deployment(
    api: ApiClient,
    upstream: LoopbackUpstream,
    name: str = "judge-dep",
    protocol: str = "openai",
    **fields: Any,
) -> None:
    base = upstream.anthropic_base_url if protocol == "anthropic" else upstream.openai_base_url
    body = {
        "name": name,
        "protocol": protocol,
        "base_url": base,
        "model": f"{protocol}-judge-model",
        "api_key": KEYS[protocol],
        "timeout_ms": 5000,
        **fields,
    }
    response = api.post("/api/v1/deployments", body)
    assert response.status_code == 201, response.content


def judged_route(
    api: ApiClient,
    name: str = "r",
    *,
    judge: dict[str, Any] | None = None,
    upstream: str | None = None,
    extra_sources: list[dict[str, Any]] | None = None,
) -> None:
    match = {
        "recall": {"top_k": 5, "min_similarity": -1},
        "judge": {"top_k": 2, "min_score": 0.5, **(judge or {})},
    }
    route = rag_route(name, "kb", match=match, timeout_ms=10_000)
    route["context"]["sources"] += extra_sources or []
    if upstream is not None:
        route["model"] = {"upstream": upstream}
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def source_named(report: dict[str, Any], name: str = "docs") -> dict[str, Any]:
    return next(s for s in report["sources"] if s["name"] == name)


def kept_ids(source: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in source.get("candidates", []) if c["kept"]]


def recall_order(source: dict[str, Any]) -> list[str]:
    ranked = sorted(source["candidates"], key=lambda c: c["recall_rank"])
    return [c["document_id"] for c in ranked]


# --- a deployment named by the judge block --------------------------------------------------------


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_named_tenant_deployment_judges_in_one_batched_call(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream, protocol: str
) -> None:
    create_deployment(acme_api, upstream, protocol=protocol)
    judged_route(acme_api, judge={"deployment": "judge-dep"})

    source = source_named(resolve(acme_api, "r", QUESTION))
    assert source["status"] == "ok"
    notes = source["notes"]
    assert notes["judged"] is True
    assert (notes["judge"], notes["judge_fallback"]) == ("deployment:judge-dep", False)
    assert kept_ids(source) == ["warranty", "exchange"]  # its order: its top 2 at >= 0.5
    by_id = {c["document_id"]: c for c in source["candidates"]}
    assert {i: c["judge_score"] for i, c in by_id.items()} == {
        i: JUDGE_SCORES[TITLE_OF[i]] for i in by_id
    }

    [seen] = upstream.requests  # one call for the whole stage
    body = seen.body
    assert body["model"] == f"{protocol}-judge-model" and body["temperature"] == 0
    titles = [title for title, _ in documents_in(body)]
    assert titles == [TITLE_OF[i] for i in recall_order(source)]  # every candidate, once each
    assert f"Query: {QUESTION}" in prompt_of(body)
    if protocol == "openai":
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["authorization"] == f"Bearer {KEYS['openai']}"
        assert "x-api-key" not in seen.headers
        assert body["response_format"] == {"type": "json_object"}
        assert body["messages"][0]["role"] == "system"
    else:
        assert seen.path == ANTHROPIC_PATH
        assert seen.headers["x-api-key"] == KEYS["anthropic"]
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in seen.headers
        assert "response_format" not in body and isinstance(body["max_tokens"], int)
        assert "relevance judge" in body["system"] and "JSON" in body["system"]
        assert [m["role"] for m in body["messages"]] == ["user"]


def test_the_tenants_deployment_wins_over_a_platform_one_of_the_same_name(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream
) -> None:
    with running_service() as platform:
        platform.responder = lambda seen: chat_reply(json.dumps({"scores": [0.0] * 5}))
        platform_deployments = {"judge-dep": {"url": platform.base, "model": "platform-judge"}}
        with override_settings(LLM_DEPLOYMENTS=platform_deployments):
            create_deployment(acme_api, upstream)
            judged_route(acme_api, judge={"deployment": "judge-dep"})
            source = source_named(resolve(acme_api, "r", QUESTION))
            assert kept_ids(source) == ["warranty", "exchange"]
            assert upstream.hits == 1 and platform.hits == 0


def test_a_platform_deployment_still_judges(acme_api: ApiClient, kb: str) -> None:
    with running_service() as platform:
        platform.responder = lambda seen: chat_reply(
            json.dumps({"scores": [score_of(t, x) for t, x in documents_in(seen.body)]})
        )
        with override_settings(
            LLM_DEPLOYMENTS={"platform-judge": {"url": platform.base, "model": "p"}}
        ):
            judged_route(acme_api, judge={"deployment": "platform-judge"})
            source = source_named(resolve(acme_api, "r", QUESTION))
        assert source["notes"]["judge"] == "deployment:platform-judge"
        assert kept_ids(source) == ["warranty", "exchange"]
        assert platform.paths == ["/v1/chat/completions"] and platform.hits == 1


# --- the route's deployment as the default judge --------------------------------------------------


@pytest.fixture
def auditor(acme: TenantFixture) -> Client:
    make_user(acme.tenant, "judge-auditor", "auditor")
    return signed_in("judge-auditor", ACME_HOST)


def replay_of(api: ApiClient, resolve_id: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/replay/{resolve_id}")
    assert response.status_code == 200, response.content
    return dict(response.json())


def sources_rows(client: Client, resolve_id: str) -> dict[str, dict[str, str]]:
    """The admin replay page's Sources table, row by source name."""
    response = client.get(admin_object_url(ReplayRecord, resolve_id))
    assert response.status_code == 200
    tables = {table.title: table for table in response.context["replay"]["tables"]}
    sources = tables["Sources"]
    return {row[0]: dict(zip(sources.columns, row, strict=True)) for row in sources.rows}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_block_naming_no_deployment_asks_the_routes_deployment(
    acme_api: ApiClient,
    kb: str,
    allow_acme: None,
    upstream: LoopbackUpstream,
    auditor: Client,
    protocol: str,
) -> None:
    create_deployment(acme_api, upstream, "gpt-up", protocol)
    judged_route(acme_api, upstream="gpt-up")  # the judge block names no deployment

    report = resolve(acme_api, "r", QUESTION)
    source = source_named(report)
    assert (source["notes"]["judge"], source["notes"]["judge_fallback"]) == (
        "deployment:gpt-up",
        False,
    )
    assert kept_ids(source) == ["warranty", "exchange"]
    [seen] = upstream.requests
    assert seen.body["model"] == f"{protocol}-judge-model"
    assert len(documents_in(seen.body)) == len(DOCUMENTS)

    record = replay_of(acme_api, report["id"])
    assert source_named(record)["notes"]["judge"] == "deployment:gpt-up"
    rows = sources_rows(auditor, report["id"])
    # the judge's cost beside its name: its calls and tokens (no price on the deployment)
    assert re.fullmatch(
        r"deployment:gpt-up; 1 call, [1-9]\d* in / [1-9]\d* out tokens, cost unknown",
        rows["docs"]["judge"],
    ), rows["docs"]["judge"]
    assert "deployment:gpt-up" not in rows["docs"]["notes"]  # shown once, in its own column

    preview = acme_api.post("/api/v1/plugins/context/preview", {"route": "r", "query": QUESTION})
    assert preview.status_code == 200, preview.content
    previewed = preview.json()["sources"][0]
    assert previewed["notes"]["judge"] == "deployment:gpt-up"
    assert [i["document_id"] for i in previewed["items"] if i["kept"]] == ["warranty", "exchange"]
    assert upstream.hits == 2  # the preview judged with the same deployment


def test_the_default_match_of_a_rag_source_is_judged_by_the_routes_deployment(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream
) -> None:
    """A rag source without a match block has the default one, judge included."""
    create_deployment(acme_api, upstream, "gpt-up")
    route = rag_route("plain", "kb", timeout_ms=10_000)
    route["model"] = {"upstream": "gpt-up"}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    source = source_named(resolve(acme_api, "plain", QUESTION))
    assert source["notes"]["judge"] == "deployment:gpt-up"
    assert upstream.hits == 1


def test_a_deployment_that_may_not_judge_leaves_the_local_judge(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream, auditor: Client
) -> None:
    create_deployment(acme_api, upstream, "stand-in", may_judge=False)
    judged_route(acme_api, upstream="stand-in", judge={"min_score": 0.0})
    report = resolve(acme_api, "r", QUESTION)
    source = source_named(report)
    assert (source["notes"]["judge"], source["notes"]["judge_fallback"]) == ("local", False)
    assert source["notes"]["judged"] is True
    assert all(c["judge_score"] is not None for c in source["candidates"])
    assert upstream.hits == 0  # nothing was sent to it
    assert sources_rows(auditor, report["id"])["docs"]["judge"] == "local"

    # Named explicitly, it is refused when the route is written...
    match = {"judge": {"deployment": "stand-in"}}
    refused = acme_api.post("/api/v1/routes", rag_route("named", "kb", match=match))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert "deployment 'stand-in' may not judge" in error["message"]
    assert error["param"] == "context.sources[0].match.judge.deployment"


def test_may_judge_turned_off_later_refuses_an_explicit_name_at_run_time(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream
) -> None:
    create_deployment(acme_api, upstream)
    judged_route(acme_api, judge={"deployment": "judge-dep"})
    response = acme_api.patch("/api/v1/deployments/judge-dep", {"may_judge": False})
    assert response.status_code == 200, response.content
    source = source_named(resolve(acme_api, "r", QUESTION))
    notes = source["notes"]
    assert notes["judge"] == "deployment:judge-dep" and notes["judge_fallback"] is True
    assert "may not judge" in notes["judge_error"]
    assert kept_ids(source) == recall_order(source)[:2]  # on_error: skip, the recall order
    assert upstream.hits == 0


def test_local_names_the_local_judge_and_no_upstream_means_local(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream
) -> None:
    create_deployment(acme_api, upstream, "gpt-up")
    judged_route(acme_api, "explicit", upstream="gpt-up", judge={"deployment": "local"})
    judged_route(acme_api, "no-upstream")
    for route in ("explicit", "no-upstream"):
        source = source_named(resolve(acme_api, route, QUESTION))
        assert source["notes"]["judge"] == "local", route
    assert upstream.hits == 0


def test_one_call_per_judged_stage(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream
) -> None:
    """A route with a judged rag and a judged memory source: two calls, each stage's candidates in
    its own batch, each stage keeping what its scores say."""
    for content in MEMORIES:
        response = acme_api.post("/api/v1/users/u1/memories", {"content": content})
        assert response.status_code == 201, response.content
    create_deployment(acme_api, upstream, "gpt-up")
    memory = {
        "type": "memory",
        "name": "memories",
        "timeout_ms": 10_000,
        "match": {
            "recall": {"top_k": 5, "min_similarity": -1},
            "judge": {"top_k": 3, "min_score": 0.5},
        },
    }
    judged_route(acme_api, upstream="gpt-up", extra_sources=[memory])
    response = acme_api.post(
        "/api/v1/resolve",
        {
            "route": "r",
            "user": "u1",
            "request": {"messages": [{"role": "user", "content": QUESTION}]},
        },
    )
    assert response.status_code == 200, response.content
    report = response.json()
    docs, memories = source_named(report), source_named(report, "memories")
    assert docs["notes"]["judge"] == memories["notes"]["judge"] == "deployment:gpt-up"
    assert kept_ids(docs) == ["warranty", "exchange"]
    assert memories["notes"]["memory_status"] == "used"
    kept_memories = [i for i in report["items"] if i["source"] == "memories"]
    assert len(kept_memories) == 1  # only the headphones memory scored >= 0.5

    assert upstream.hits == 2  # one call per judged stage
    batches = sorted(len(documents_in(seen.body)) for seen in upstream.requests)
    assert batches == sorted([len(DOCUMENTS), len(MEMORIES)])
    memory_call = next(s for s in upstream.requests if len(documents_in(s.body)) == len(MEMORIES))
    assert sorted(text for _, text in documents_in(memory_call.body)) == sorted(MEMORIES)


# --- failures follow on_error ---------------------------------------------------------------------


def test_a_failing_default_judge_follows_on_error(
    acme_api: ApiClient, kb: str, allow_acme: None, upstream: LoopbackUpstream, auditor: Client
) -> None:
    create_deployment(acme_api, upstream, "gpt-up")
    judged_route(acme_api, "skipping", upstream="gpt-up")
    judged_route(acme_api, "blocking", upstream="gpt-up", judge={"on_error": "block"})
    upstream.fail(500, {"error": {"message": "overloaded"}})

    report = resolve(acme_api, "skipping", QUESTION)
    source = source_named(report)
    assert source["status"] == "ok"
    notes = source["notes"]
    assert (notes["judge"], notes["judge_fallback"]) == ("deployment:gpt-up", True)
    assert "HTTP 500" in notes["judge_error"] and "overloaded" in notes["judge_error"]
    assert kept_ids(source) == recall_order(source)[:2]
    row = sources_rows(auditor, report["id"])["docs"]
    assert row["judge"].startswith("deployment:gpt-up (fell back to recall order); 1 call"), row[
        "judge"
    ]

    blocked = source_named(resolve(acme_api, "blocking", QUESTION))
    assert blocked["status"] == "failed"
    assert "relevance judge failed (deployment:gpt-up)" in blocked["error"]
    assert upstream.hits == 2


# --- the outbound guard ---------------------------------------------------------------------------


def test_a_loopback_deployment_is_refused_unless_the_allow_list_names_it(
    acme_api: ApiClient, acme: TenantFixture, kb: str, upstream: LoopbackUpstream
) -> None:
    with outbound_allowlist(acme.schema, ["search.internal"]):  # not loopback
        create_deployment(acme_api, upstream)
        create_deployment(acme_api, upstream, "gpt-up")
        judged_route(acme_api, judge={"deployment": "judge-dep"})
        judged_route(acme_api, "default", upstream="gpt-up")
        for route, judge in (("r", "judge-dep"), ("default", "gpt-up")):
            source = source_named(resolve(acme_api, route, QUESTION))
            notes = source["notes"]
            assert (notes["judge"], notes["judge_fallback"]) == (f"deployment:{judge}", True)
            assert "refused by the outbound guard" in notes["judge_error"]
            assert "loopback" in notes["judge_error"]
            assert kept_ids(source) == recall_order(source)[:2]
        assert upstream.hits == 0  # refused before anything was sent

    with outbound_allowlist(acme.schema, [LOOPBACK]):
        for route in ("r", "default"):
            source = source_named(resolve(acme_api, route, QUESTION))
            assert source["notes"]["judge_fallback"] is False
            assert kept_ids(source) == ["warranty", "exchange"]
        assert upstream.hits == 2


# --- names checked when the route is written ------------------------------------------------------


def test_judge_deployment_names_are_checked_when_the_route_is_written(
    acme_api: ApiClient, globex_api: ApiClient, kb: str, upstream: LoopbackUpstream
) -> None:
    create_deployment(acme_api, upstream)
    accepted = acme_api.post(
        "/api/v1/routes", rag_route("ok", "kb", match={"judge": {"deployment": "judge-dep"}})
    )
    assert accepted.status_code == 201, accepted.content

    with override_settings(
        LLM_DEPLOYMENTS={"platform-judge": {"url": "http://x.test", "model": "m"}}
    ):
        unknown = acme_api.post(
            "/api/v1/routes", rag_route("bad", "kb", match={"judge": {"deployment": "nope"}})
        )
        assert unknown.status_code == 400
        error = unknown.json()["error"]
        assert error["param"] == "context.sources[0].match.judge.deployment"
        message = error["message"]
        assert "unknown deployment 'nope' (known: local, judge-dep, platform-judge)" in message
        assert "neither this tenant's deployments" in message and "LLM_DEPLOYMENTS" in message

        # Another tenant's deployment is not this tenant's.
        make_collection(globex_api, "kb", [dict(doc) for doc in DOCUMENTS])
        other = globex_api.post(
            "/api/v1/routes", rag_route("bad", "kb", match={"judge": {"deployment": "judge-dep"}})
        )
        assert other.status_code == 400
        assert "(known: local, platform-judge)" in other.json()["error"]["message"]


# --- the compress stage's judge -------------------------------------------------------------------


def two_tool_outputs() -> dict[str, Any]:
    """Two large tool outputs, so the compress stage has blocks to order."""
    headphones = "\n".join(f"ticket {i}: headphones crackle on the left side" for i in range(1500))
    weather = "\n".join(f"reading {i}: 12 degrees and light rain" for i in range(1500))
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        for i in (1, 2)
    ]
    return {
        "messages": [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": headphones},
            {"role": "tool", "tool_call_id": "call_2", "content": weather},
            {"role": "user", "content": QUESTION},
        ]
    }


@pytest.mark.parametrize("may_judge", [True, False])
def test_the_compress_stage_asks_the_routes_deployment_when_it_may_judge(
    acme_api: ApiClient, allow_acme: None, upstream: LoopbackUpstream, may_judge: bool
) -> None:
    create_deployment(acme_api, upstream, "gpt-up", may_judge=may_judge)
    targets = {"tool_outputs": {"mode": "extractive", "min_tokens": 2000, "target_tokens": 500}}
    route = {
        "name": "squeeze",
        "model": {"upstream": "gpt-up", "context_window": 16000},
        "context": {"compress": {"targets": targets}},
    }
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    response = acme_api.post("/api/v1/resolve", {"route": "squeeze", "request": two_tool_outputs()})
    assert response.status_code == 200, response.content
    compression = response.json()["compression"]
    assert compression["applied"] is True
    if may_judge:
        assert compression["judge"] == "deployment:gpt-up"
        [seen] = upstream.requests  # one batched call for the stage
        assert len(documents_in(seen.body)) == 2
        assert "judge_failed" not in " ".join(compression["warnings"])
    else:
        assert compression["judge"] == "local"
        assert upstream.hits == 0
