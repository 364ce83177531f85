"""``POST /api/v1/replay/{id}/rerun`` over HTTP against real PostgreSQL: a recorded request
resolved again (the route as it is now, or a draft of its context) beside its record, and the
diff item by item; nothing written; a judge's call reported; 409 without captured content, 403 for
a draft without ``routes.write``, 404 across tenants."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from contextplatform.replay.item_keys import content_hash
from contextplatform.replay.models import ReplayRecord
from memory.models import Memory
from sources.models import ChatMessage
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection
from tests.upstream import LoopbackUpstream, running_upstream

QUESTION = "My headphones make a crackling sound: is that covered by the warranty?"
RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}


def rag(**match: Any) -> dict[str, Any]:
    return {
        "type": "rag",
        "name": "docs",
        "backend": "vectorstore",
        "backend_config": {"collection": "kb"},
        "match": {"recall": {"top_k": 3, "min_similarity": -1}, **match},
        "timeout_ms": 10_000,
    }


def context(*sources: dict[str, Any]) -> dict[str, Any]:
    return {"sources": list(sources), "injection": {"mode": "system_prompt"}}


@pytest.fixture
def capturing(acme: TenantFixture) -> Iterator[TenantFixture]:
    """acme keeps each request's content (what a rerun runs again)."""
    set_capture(acme, True)
    yield acme
    set_capture(acme, False)


def set_capture(tenant: TenantFixture, on: bool) -> None:
    connection.set_schema_to_public()
    tenant.tenant.capture_content = on
    tenant.tenant.save()


@pytest.fixture
def kb(acme_api: ApiClient) -> str:
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    return "kb"


def make_route(api: ApiClient, body: dict[str, Any], name: str = "rr") -> None:
    response = api.post("/api/v1/routes", {"name": name, "context": body, **{}})
    assert response.status_code == 201, response.content


def resolved(api: ApiClient, route: str = "rr", **extra: Any) -> str:
    request = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    response = api.post("/api/v1/resolve", {"route": route, "request": request, **extra})
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def rerun(api: ApiClient, record_id: str, body: dict[str, Any] | None = None) -> Any:
    return api.post(f"/api/v1/replay/{record_id}/rerun", body or {})


def rerun_ok(api: ApiClient, record_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = rerun(api, record_id, body)
    assert response.status_code == 200, response.content
    return dict(response.json())


def kept(side: dict[str, Any], source: str) -> list[str]:
    return [i["id"] for i in side["items"] if i["source"] == source and i["kept"]]


@pytest.fixture
def route(capturing: TenantFixture, acme_api: ApiClient, kb: str) -> str:
    make_route(acme_api, context(rag(), RULES))
    return resolved(acme_api)


def test_a_rerun_of_the_route_as_it_is_changes_nothing(acme_api: ApiClient, route: str) -> None:
    answer = rerun_ok(acme_api, route)
    recorded, again, diff = answer["recorded"], answer["rerun"], answer["diff"]
    assert recorded["id"] == route
    # Items named by source and document id (RAG), or a hash of their content (the rules).
    assert set(kept(recorded, "docs")) <= {doc["id"] for doc in SUPPORT_DOCS}
    assert kept(recorded, "docs") and "warranty" in kept(recorded, "docs")
    assert kept(recorded, "rules") == [content_hash("Be kind.")]
    assert kept(again, "docs") == kept(recorded, "docs")
    assert [s["status"] for s in again["sources"]] == [s["status"] for s in recorded["sources"]]
    assert diff["matched_by"] == "id"
    assert diff["added"] == diff["dropped"] == diff["moved"] == diff["changed"] == []
    assert diff["sources"] == []
    assert diff["tokens"]["recorded"] == diff["tokens"]["rerun"] > 0
    assert again["judge_usage"] is None  # the local judge costs nothing


def test_a_draft_without_the_rag_source_drops_its_documents(
    acme_api: ApiClient, route: str
) -> None:
    answer = rerun_ok(acme_api, route, {"context": context(RULES)})
    diff = answer["diff"]
    recorded_docs = kept(answer["recorded"], "docs")
    assert sorted(d["id"] for d in diff["dropped"]) == sorted(recorded_docs)
    assert {d["source"] for d in diff["dropped"]} == {"docs"}
    assert all(d["now"] is None for d in diff["dropped"])  # not recalled at all now
    assert diff["added"] == []
    assert diff["sources"] == [
        {
            "name": "docs",
            "status": {"recorded": "ok", "rerun": None},
            "kept": {"recorded": len(recorded_docs), "rerun": None},
        }
    ]
    assert diff["tokens"]["rerun"] < diff["tokens"]["recorded"]
    # Not saved: the route as it is still has its RAG source.
    assert rerun_ok(acme_api, route)["diff"]["dropped"] == []


def test_a_draft_raising_the_similarity_threshold_changes_the_items(
    acme_api: ApiClient, route: str
) -> None:
    answer = rerun_ok(
        acme_api, route, {"context": context(rag(recall={"min_similarity": 0.99}), RULES)}
    )
    diff = answer["diff"]
    assert sorted(d["id"] for d in diff["dropped"]) == sorted(kept(answer["recorded"], "docs"))
    assert kept(answer["rerun"], "docs") == []
    [docs] = diff["sources"]
    assert docs["name"] == "docs" and docs["kept"]["rerun"] == 0
    assert docs["status"] == {"recorded": "ok", "rerun": "empty"}


def test_a_draft_with_fewer_results_moves_nothing_it_keeps(acme_api: ApiClient, route: str) -> None:
    """A tighter top_k keeps the best documents at the same ranks: only the rest is dropped."""
    answer = rerun_ok(
        acme_api, route, {"context": context(rag(recall={"top_k": 1, "min_similarity": -1}), RULES)}
    )
    recorded_docs = kept(answer["recorded"], "docs")
    assert len(recorded_docs) > 1
    assert kept(answer["rerun"], "docs") == recorded_docs[:1]
    assert sorted(d["id"] for d in answer["diff"]["dropped"]) == sorted(recorded_docs[1:])
    assert answer["diff"]["moved"] == []


def test_a_bad_draft_is_refused_with_its_path(acme_api: ApiClient, route: str) -> None:
    bad = context({**RULES, "priority": "high"})
    response = rerun(acme_api, route, {"context": bad})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"] == "context.sources[0].priority"
    unknown = rerun(acme_api, route, {"contexts": {}})
    assert unknown.status_code == 400


def test_a_record_without_its_request_is_409_naming_capture_content(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    make_route(acme_api, context(RULES))
    record = resolved(acme_api)
    response = rerun(acme_api, record)
    assert response.status_code == 409, response.content
    assert "capture_content" in response.json()["error"]["message"]


def test_a_draft_needs_routes_write(acme: TenantFixture, route: str) -> None:
    connection.set_schema_to_public()
    reader = ApiClient(issue_api_key(tenant=acme.tenant, scopes="replay.read").plain_key)
    denied = rerun(reader, route, {"context": context(RULES)})
    assert denied.status_code == 403, denied.content
    assert "routes.write" in denied.json()["error"]["message"]
    assert rerun(reader, route).status_code == 200  # the route as it is: replay.read is enough
    nobody = ApiClient(issue_api_key(tenant=acme.tenant, scopes="resolve").plain_key)
    assert rerun(nobody, route).status_code == 403


def test_another_tenants_record_is_not_found(globex_api: ApiClient, route: str) -> None:
    response = rerun(globex_api, route)
    assert response.status_code == 404, response.content
    assert route in response.json()["error"]["message"]
    assert rerun(globex_api, "rsv_00000000nothere").status_code == 404


def counts(tenant: TenantFixture) -> dict[str, int]:
    with schema_context(tenant.schema):
        return {
            "replay_records": ReplayRecord.objects.count(),
            "session_messages": ChatMessage.objects.count(),
            "memories": Memory.objects.count(),
        }


def test_a_rerun_writes_nothing(capturing: TenantFixture, acme_api: ApiClient, kb: str) -> None:
    memory = {"type": "memory", "name": "memories", "match": {"recall": {"min_similarity": -1}}}
    history = {"type": "recent_messages", "name": "history"}
    make_route(acme_api, context(rag(), memory, history, RULES))
    added = acme_api.post("/api/v1/users/u_rr/memories", {"content": "User owns headphones."})
    assert added.status_code == 201, added.content
    earlier = {"user": "u_rr", "messages": [{"role": "user", "content": "Hello there."}]}
    assert acme_api.post("/api/v1/sessions/s_rr/messages", earlier).status_code == 201
    record = resolved(acme_api, user="u_rr", session="s_rr")
    later = {"user": "u_rr", "messages": [{"role": "user", "content": "A later message."}]}
    assert acme_api.post("/api/v1/sessions/s_rr/messages", later).status_code == 201
    before = counts(capturing)
    answer = rerun_ok(acme_api, record)
    draft = rerun_ok(acme_api, record, {"context": context(memory, RULES)})
    assert counts(capturing) == before
    # The memory named by its id, on both sides.
    with schema_context(capturing.schema):
        memory_id = str(Memory.objects.get(user_id="u_rr").pk)
    assert kept(answer["recorded"], "memories") == [memory_id] == kept(answer["rerun"], "memories")
    assert kept(draft["rerun"], "memories") == [memory_id]
    # The history as the record read it: the earlier message only, neither the turn's own nor
    # the later one (stored after the record), either of which would give the history item
    # another content hash.
    assert kept(answer["rerun"], "history") == kept(answer["recorded"], "history")
    assert len(kept(answer["recorded"], "history")) == 1
    with schema_context(capturing.schema):
        assert ChatMessage.objects.filter(session__key="s_rr").count() == 3  # all there now
    assert answer["diff"]["added"] == answer["diff"]["dropped"] == []


DOCUMENT = re.compile(r'<document index="(\d+)"(?: title="([^"]*)")?>\n(.*?)\n</document>', re.S)


def judging(body: dict[str, Any]) -> str:
    """One score per document: the warranty relevant, the rest not."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    found = DOCUMENT.findall(str(users[-1]["content"]))
    return json.dumps({"scores": [0.9 if "warranty" in t.lower() else 0.1 for _, t, _ in found]})


@pytest.fixture
def upstream(capturing: TenantFixture) -> Iterator[LoopbackUpstream]:
    with running_upstream() as running, outbound_allowlist(capturing.schema, [LOOPBACK]):
        running.answer_with(judging)
        yield running


def test_the_routes_judge_is_called_and_its_cost_reported(
    acme_api: ApiClient, kb: str, upstream: LoopbackUpstream
) -> None:
    deployment = {
        "name": "judge-dep",
        "protocol": "openai",
        "base_url": upstream.openai_base_url,
        "model": "judge-model",
        "api_key": "sk-judge-" + "3" * 24,
        "timeout_ms": 5000,
        "may_judge": True,
    }
    assert acme_api.post("/api/v1/deployments", deployment).status_code == 201
    source = rag(judge={"top_k": 2, "min_score": 0.5})
    body = {"name": "judged", "model": {"upstream": "judge-dep"}, "context": context(source)}
    assert acme_api.post("/api/v1/routes", body).status_code == 201
    record = resolved(acme_api, "judged")
    before = upstream.hits
    answer = rerun_ok(acme_api, record)
    judge_calls = upstream.hits - before
    assert judge_calls == 1  # the judge, and no answer asked of the model
    usage = answer["rerun"]["judge_usage"]
    assert usage["calls"] == 1 and usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    [docs] = answer["rerun"]["sources"]
    assert docs["judge_usage"] == usage
    assert kept(answer["rerun"], "docs") == ["warranty"] == kept(answer["recorded"], "docs")
    assert answer["diff"]["dropped"] == answer["diff"]["added"] == []


def test_a_record_whose_route_is_gone_is_409(acme_api: ApiClient, route: str) -> None:
    assert acme_api.delete("/api/v1/routes/rr").status_code == 204
    response = rerun(acme_api, route)
    assert response.status_code == 409, response.content
    assert "no longer exists" in response.json()["error"]["message"]
    assert rerun(acme_api, route, {"context": context(RULES)}).status_code == 404
