"""Evaluation sets through the REST API on real PostgreSQL: cases, runs on demand and after each
save (of the route, its recipe, the tenant defaults), metrics on a known collection, the warning
when a save makes it worse, memory text by scope, isolation between tenants."""

from __future__ import annotations

from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.evals.models import EvalRun
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection

GUARDRAIL = {"type": "skill_guardrails", "name": "rules", "texts": ["Quote the 30-day policy."]}
DOCS = {
    "type": "rag",
    "name": "docs",
    "backend": "vectorstore",
    "backend_config": {"collection": "kb"},
}
MEMORIES = {"type": "memory", "name": "memories"}

CASES = [
    {
        "id": "refund",
        "query": "Can I return my order within 30 days for a full refund?",
        "expect": {"documents": ["refund"], "text_containing": ["30-day policy"]},
    },
    {
        "id": "warranty",
        "query": "My headphones make a crackling sound, is that covered by the warranty?",
        "expect": {"documents": ["warranty"]},
    },
    {
        "id": "lisbon",
        "query": "Where do I live?",
        "user": "u_eval",
        "expect": {"memories_containing": ["lisbon"]},
    },
]


class Committed:
    """An API client whose every call ends in a commit: what it commits runs its on-commit work
    (a run), as outside a test, where each request is its own transaction."""

    def __init__(self, api: ApiClient, capture: Any):
        self.api, self.capture = api, capture

    def __getattr__(self, method: str) -> Any:
        call = getattr(self.api, method)

        def committed(*args: Any, **kwargs: Any) -> Any:
            with self.capture(execute=True):
                return call(*args, **kwargs)

        return committed


@pytest.fixture
def acme_api(acme: TenantFixture, django_capture_on_commit_callbacks: Any) -> Any:
    return Committed(ApiClient(acme.key), django_capture_on_commit_callbacks)


@pytest.fixture
def route(acme_api: Any) -> str:
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    added = acme_api.post(
        "/api/v1/users/u_eval/memories", {"content": "User lives in Lisbon since March"}
    )
    assert added.status_code == 201, added.content
    created = acme_api.post(
        "/api/v1/routes",
        {"name": "helpdesk", "context": {"sources": [GUARDRAIL, DOCS, MEMORIES]}},
    )
    assert created.status_code == 201, created.content
    put = acme_api.put("/api/v1/routes/helpdesk/evals", {"cases": CASES})
    assert put.status_code == 200, put.content
    return "helpdesk"


def run_now(api: Any, route: str) -> dict[str, Any]:
    started = api.post(f"/api/v1/routes/{route}/evals/run")
    assert started.status_code == 202, started.content
    run = api.get(f"/api/v1/eval-runs/{started.json()['run']}")
    assert run.status_code == 200, run.content
    return run.json()


def latest(route: str) -> EvalRun:
    with schema_context("acme"):
        found = EvalRun.objects.filter(route__name=route).order_by("-created_at").first()
    assert found is not None
    return found


def runs_of(route: str) -> int:
    with schema_context("acme"):
        return EvalRun.objects.filter(route__name=route).count()


def test_cases_read_back_as_written(acme_api: Any, route: str) -> None:
    got = acme_api.get(f"/api/v1/routes/{route}/evals").json()
    assert got["cases"] == CASES
    # A GET's answer puts back as it is.
    assert acme_api.put(f"/api/v1/routes/{route}/evals", got).status_code == 200
    assert acme_api.put(f"/api/v1/routes/{route}/evals", {"cases": []}).json()["cases"] == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"cases": [CASES[0], {**CASES[1], "id": "refund"}]}, "cases[1].id"),
        ({"cases": [{**CASES[0], "query": "  "}]}, "cases[0].query"),
        ({"cases": [{**CASES[0], "expect": {}}]}, "cases[0].expect"),
        ({"cases": [{**CASES[0], "expect": {"documents": "refund"}}]}, "cases[0].expect.documents"),
        ({"cases": [{**CASES[0], "id": "has space"}]}, "cases[0].id"),
        ({"cases": [{**CASES[0], "colour": "red"}]}, "cases[0].colour"),
        ({"cases": [{**CASES[0], "id": f"c{i}"} for i in range(501)]}, "cases"),
        ([], None),
    ],
)
def test_bad_cases_are_a_clear_400(acme_api: Any, route: str, body: Any, param: str | None) -> None:
    response = acme_api.put(f"/api/v1/routes/{route}/evals", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == param
    assert acme_api.get(f"/api/v1/routes/{route}/evals").json()["cases"] == CASES


def test_a_run_measures_what_each_case_kept(acme_api: Any, route: str) -> None:
    run = run_now(acme_api, route)
    assert run["status"] == "done", run
    cases = {case["id"]: case for case in run["cases"]}
    assert set(cases) == {"refund", "warranty", "lisbon"}
    assert all(case["hit"] for case in cases.values()), cases
    # The metrics follow from what each case kept, as scoring.py defines them.
    precisions = []
    for name in ("refund", "warranty"):
        kept = list(dict.fromkeys(k["document"] for k in cases[name]["kept"] if "document" in k))
        assert kept and name in kept
        precisions.append(kept.count(name) / len(kept))
        assert cases[name]["kept_precision"] == pytest.approx(precisions[-1], abs=1e-4)
    metrics = run["metrics"]
    assert metrics["cases"] == 3 and metrics["hit_rate"] == 1.0
    assert metrics["kept_precision"] == pytest.approx(sum(precisions) / 2, abs=1e-4)
    assert 0 < metrics["ndcg"] <= 1 and metrics["tokens_mean"] > 0
    assert metrics["latency_p50_ms"] >= 0
    assert run["route_version"] == 1 and run["previous"] is None and run["warning"] is None
    assert "arms" not in run  # a route without variants has main alone
    # The memory's text is shown to a key with memory.read (acme's key holds every scope).
    memory = [k for k in cases["lisbon"]["kept"] if "memory" in k]
    assert memory and "Lisbon" in memory[0]["text"]


def test_a_run_writes_nothing_but_itself(acme_api: Any, acme: TenantFixture, route: str) -> None:
    from contextplatform.replay.models import ReplayRecord
    from memory.models import Memory

    with schema_context(acme.schema):
        before = (
            ReplayRecord.objects.count(),
            list(Memory.objects.values_list("strength", "last_used_at")),
        )
    run_now(acme_api, route)
    with schema_context(acme.schema):
        after = (
            ReplayRecord.objects.count(),
            list(Memory.objects.values_list("strength", "last_used_at")),
        )
    assert after == before


def test_memory_text_needs_memory_read(acme: TenantFixture, acme_api: Any, route: str) -> None:
    run = run_now(acme_api, route)
    reader = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes=["routes.read"], name="reader").plain_key
    )
    seen = reader.get(f"/api/v1/eval-runs/{run['id']}").json()
    lisbon = next(case for case in seen["cases"] if case["id"] == "lisbon")
    assert lisbon["hit"] and all("text" not in k for k in lisbon["kept"] if "memory" in k)
    assert "Lisbon" not in str(seen)
    # The text is read when the run is shown: a memory erased since leaves none behind.
    (memory,) = [k for case in run["cases"] for k in case.get("kept", []) if "memory" in k]
    erased = acme_api.delete(f"/api/v1/users/u_eval/memories/{memory['memory']}")
    assert erased.status_code == 200, erased.content
    again = acme_api.get(f"/api/v1/eval-runs/{run['id']}").json()
    assert "Lisbon" not in str(again)


def test_a_save_runs_the_cases_and_a_dropped_source_is_a_warning(acme_api: Any, route: str) -> None:
    assert runs_of(route) == 0  # cases alone run nothing
    saved = acme_api.patch(f"/api/v1/routes/{route}", {"description": "v2"})
    assert saved.status_code == 200 and saved.json()["version"] == 2
    first = latest(route)
    assert first.triggered_by == "save" and first.status == "done" and first.route_version == 2
    assert first.metrics["hit_rate"] == 1.0
    # The save drops the documents the cases need.
    acme_api.patch(f"/api/v1/routes/{route}", {"context": {"sources": [GUARDRAIL, MEMORIES]}})
    second = latest(route)
    assert second.pk != first.pk and second.route_version == 3
    run = acme_api.get(f"/api/v1/eval-runs/{second.pk}").json()
    assert run["metrics"]["hit_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert run["previous"]["run"] == first.pk and run["previous"]["hit_rate"] == 1.0
    assert run["warning"] and "hit rate fell from 100% to 33%" in run["warning"]
    missing = {case["id"]: case.get("missing") for case in run["cases"]}
    assert missing["warranty"] == {"documents": ["warranty"]}


def test_each_arm_is_run_and_a_variant_without_the_documents_hits_less(
    acme_api: Any, route: str
) -> None:
    # The variant keeps the guardrail and the memories but drops the documents two cases need.
    variant = {"name": "b", "weight": 0.5, "context": {"sources": [GUARDRAIL, MEMORIES]}}
    saved = acme_api.patch(f"/api/v1/routes/{route}", {"variants": [variant]})
    assert saved.status_code == 200, saved.content
    after_save = acme_api.get(f"/api/v1/eval-runs/{latest(route).pk}").json()
    on_demand = run_now(acme_api, route)
    for run in (after_save, on_demand):
        assert run["status"] == "done", run
        arms = run["arms"]
        assert set(arms) == {"main", "b"}
        # The top-level metrics and cases stay main's.
        assert arms["main"] == run["metrics"] and arms["main"]["hit_rate"] == 1.0
        assert all(case["hit"] for case in run["cases"])
        assert arms["b"]["cases"] == 3
        assert arms["b"]["hit_rate"] == pytest.approx(1 / 3, abs=1e-4)
        assert arms["b"]["hit_rate"] < arms["main"]["hit_rate"]
        assert arms["b"]["kept_precision"] == 0.0 < arms["main"]["kept_precision"]
    # Main did not change: the variant's misses are no regression of the route.
    assert on_demand["warning"] is None
    # Without its variants the route's runs measure main alone again.
    assert acme_api.patch(f"/api/v1/routes/{route}", {"variants": []}).status_code == 200
    assert "arms" not in run_now(acme_api, route)


def budget(max_tokens: int) -> list[dict[str, Any]]:
    """A layer of a configuration document that sets the context budget."""
    return [{"type": "context", "configuration": {"budget": {"max_tokens": max_tokens}}}]


def test_a_recipe_change_runs_the_routes_that_use_it(acme_api: Any, route: str) -> None:
    body = {"recipes": [{"name": "base", "plugins": budget(4000)}]}
    assert acme_api.post("/api/v1/routes/import", body).status_code == 200
    acme_api.patch(f"/api/v1/routes/{route}", {"recipe": "base"})
    other = acme_api.post("/api/v1/routes", {"name": "other", "recipe": "base"})
    assert other.status_code == 201
    before = runs_of(route)
    changed = {"recipes": [{"name": "base", "plugins": budget(3000)}]}
    assert acme_api.post("/api/v1/routes/import", changed).status_code == 200
    assert runs_of(route) == before + 1 and latest(route).triggered_by == "save"
    # The route without cases ran nothing; a change that changes nothing runs nothing again.
    assert runs_of("other") == 0
    assert acme_api.post("/api/v1/routes/import", changed).status_code == 200
    assert runs_of(route) == before + 1


def test_a_tenant_defaults_change_runs_every_route_with_cases(acme_api: Any, route: str) -> None:
    body = {"defaults": {"plugins": budget(5000)}}
    assert acme_api.post("/api/v1/routes/import", body).status_code == 200
    assert latest(route).triggered_by == "save"


def test_running_a_route_without_cases_is_a_400(acme_api: Any) -> None:
    acme_api.post("/api/v1/routes", {"name": "bare", "context": {"sources": [GUARDRAIL]}})
    response = acme_api.post("/api/v1/routes/bare/evals/run")
    assert (
        response.status_code == 400 and "no evaluation cases" in response.json()["error"]["message"]
    )
    assert acme_api.post("/api/v1/routes/nowhere/evals/run").status_code == 404
    assert acme_api.get("/api/v1/routes/nowhere/evals").status_code == 404


def test_another_tenants_run_is_not_found(acme_api: Any, globex_api: ApiClient, route: str) -> None:
    run = run_now(acme_api, route)
    response = globex_api.get(f"/api/v1/eval-runs/{run['id']}")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert globex_api.get(f"/api/v1/routes/{route}/evals").status_code == 404
    assert globex_api.post(f"/api/v1/routes/{route}/evals/run").status_code == 404


def test_running_needs_the_evals_run_scope(acme: TenantFixture, route: str) -> None:
    writer = ApiClient(
        issue_api_key(
            tenant=acme.tenant, scopes=["routes.read", "routes.write"], name="writer"
        ).plain_key
    )
    response = writer.post(f"/api/v1/routes/{route}/evals/run")
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
