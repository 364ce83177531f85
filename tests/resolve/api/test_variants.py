"""A route's ``variants`` over HTTP: traffic split by a stable hash of the user (else the
session, else the request), the arm named by the record and ``x-context-variant``, each arm's
context what is resolved, and the routes API's validation, round trip, export and import."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from tests.conftest import ApiClient, TenantFixture

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
TONE = {"type": "skill_guardrails", "name": "tone", "texts": ["Be brief."]}
USERS = 400


def chat(text: str = "Where is my parcel?") -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}


def split_route(name: str, variants: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "context": {"sources": [RULES, TONE]},
        "variants": variants
        if variants is not None
        else [
            {"name": "b", "weight": 0.3, "context": {"sources": [RULES]}},
            {"name": "c", "weight": 0.2, "context": {"sources": [TONE]}},
        ],
    }


def created(api: ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 201, response.content
    return dict(response.json())


def resolve(api: ApiClient, route: str, **fields: Any) -> tuple[dict[str, Any], str]:
    response = api.post("/api/v1/resolve", {"route": route, "request": chat(), **fields})
    assert response.status_code == 200, response.content
    return response.json(), response.headers["x-context-variant"]


def refused(api: ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 400, response.content
    return dict(response.json()["error"])


# --- the split ----------------------------------------------------------------------------------


def test_users_split_by_weight_and_each_keeps_their_arm(acme_api: ApiClient) -> None:
    created(acme_api, split_route("split"))
    arms: dict[str, str] = {}
    for index in range(USERS):
        report, header = resolve(acme_api, "split", user=f"user-{index}")
        assert header == report["variant"]
        arms[f"user-{index}"] = header
    counts = Counter(arms.values())
    assert set(counts) == {"main", "b", "c"}
    # Expected 200, 120 and 80: a wide tolerance, the hash is fixed so this never flickers.
    assert 150 <= counts["main"] <= 250, counts
    assert 80 <= counts["b"] <= 160, counts
    assert 45 <= counts["c"] <= 115, counts
    for user in list(arms)[:20]:  # the same user, the same arm, every time
        assert resolve(acme_api, "split", user=user)[1] == arms[user]


def test_each_arm_resolves_its_own_context_and_the_record_names_it(
    acme_api: ApiClient,
) -> None:
    created(acme_api, split_route("arms"))
    seen: dict[str, dict[str, Any]] = {}
    for index in range(200):
        report, arm = resolve(acme_api, "arms", user=f"someone-{index}")
        seen.setdefault(arm, report)
        if len(seen) == 3:
            break
    assert set(seen) == {"main", "b", "c"}
    names = {arm: {s["name"] for s in report["sources"]} for arm, report in seen.items()}
    assert names == {"main": {"rules", "tone"}, "b": {"rules"}, "c": {"tone"}}
    for arm, report in seen.items():
        record = acme_api.get(f"/api/v1/replay/{report['id']}").json()
        assert record["variant"] == arm
        assert {s["name"] for s in record["sources"]} == names[arm]


def test_without_a_user_the_session_decides_then_the_request(acme_api: ApiClient) -> None:
    created(acme_api, split_route("sessions", [{"name": "b", "weight": 0.5, "context": {}}]))
    by_session = {resolve(acme_api, "sessions", session="s-fixed")[1] for _ in range(5)}
    assert len(by_session) == 1
    anonymous = Counter(resolve(acme_api, "sessions")[1] for _ in range(60))
    assert set(anonymous) == {"main", "b"}  # each request placed on its own


def test_a_route_without_variants_is_main(acme_api: ApiClient) -> None:
    created(acme_api, {"name": "plain", "context": {"sources": [RULES]}})
    report, header = resolve(acme_api, "plain", user="u1")
    assert header == report["variant"] == "main"
    assert acme_api.get(f"/api/v1/replay/{report['id']}").json()["variant"] == "main"


def test_all_the_traffic_on_a_variant(acme_api: ApiClient) -> None:
    created(acme_api, split_route("all-b", [{"name": "b", "weight": 1, "context": {}}]))
    assert {resolve(acme_api, "all-b", user=f"u{i}")[1] for i in range(10)} == {"b"}


def test_a_variant_layers_on_the_recipe_not_on_the_route(acme_api: ApiClient) -> None:
    recipe = {
        "recipes": [
            {
                "name": "kind",
                "plugins": [
                    {
                        "type": "context",
                        "configuration": {"sources": [RULES], "budget": {"context_tokens": 321}},
                    }
                ],
            }
        ]
    }
    assert acme_api.post("/api/v1/routes/import", recipe).status_code == 200
    body = {
        "name": "layered",
        "recipe": "kind",
        "context": {"sources": [TONE], "budget": {"context_tokens": 999}},
        "variants": [
            {"name": "b", "weight": 1, "context": {"injection": {"mode": "system_prompt"}}}
        ],
    }
    created(acme_api, body)
    report, arm = resolve(acme_api, "layered", user="u1")
    assert arm == "b"
    assert [s["name"] for s in report["sources"]] == ["rules"]  # the recipe's, not the route's
    assert report["budget"]["context"] == 321


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variants", "param"),
    [
        ([{"name": "main", "weight": 0.5, "context": {}}], "variants[0].name"),
        ([{"name": "B c", "weight": 0.5, "context": {}}], "variants[0].name"),
        (
            [{"name": "b", "weight": 0.2, "context": {}}, {"name": "b", "weight": 0.2}],
            "variants[1].name",
        ),
        ([{"name": "b", "weight": 0, "context": {}}], "variants[0].weight"),
        ([{"name": "b", "weight": 1.5, "context": {}}], "variants[0].weight"),
        ([{"name": "b", "weight": "half", "context": {}}], "variants[0].weight"),
        ([{"name": "b", "weight": 0.6}, {"name": "c", "weight": 0.6}], "variants"),
        ([{"name": f"v{i}", "weight": 0.05} for i in range(11)], "variants"),
        ([{"name": "b", "weight": 0.5, "colour": "red"}], "variants[0].colour"),
        (
            [{"name": "b", "weight": 0.5, "context": {"sources": [{**RULES, "priority": "x"}]}}],
            "variants[0].context.sources[0].priority",
        ),
        (
            [{"name": "b", "weight": 0.5, "context": {"compress": {"signals": {}}}}],
            "variants[0].context.compress.signals",
        ),
        ({"name": "b"}, "variants"),
    ],
)
def test_variants_are_validated(acme_api: ApiClient, variants: Any, param: str) -> None:
    error = refused(acme_api, split_route("invalid", variants))
    assert error["code"] == "invalid_request"
    assert error["param"] == param, error
    assert acme_api.get("/api/v1/routes/invalid").status_code == 404


def test_ten_variants_are_allowed(acme_api: ApiClient) -> None:
    variants = [{"name": f"v{i}", "weight": 0.1, "context": {}} for i in range(10)]
    route = created(acme_api, split_route("ten", variants))
    assert [v["name"] for v in route["variants"]] == [f"v{i}" for i in range(10)]


# --- the routes API: round trip, patch, export and import --------------------------------------


def test_a_route_with_variants_reads_back_as_written(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    body = split_route("round")
    route = created(acme_api, body)
    assert route["variants"] == body["variants"]
    read = acme_api.get("/api/v1/routes/round").json()
    assert read["variants"] == body["variants"]
    again = acme_api.put("/api/v1/routes/round", read)
    assert again.status_code == 200, again.content
    assert again.json()["variants"] == body["variants"]
    # Posted to another tenant as it was read.
    elsewhere = globex_api.post("/api/v1/routes", read)
    assert elsewhere.status_code == 201, elsewhere.content
    assert elsewhere.json()["variants"] == body["variants"]


def test_put_without_variants_removes_them_and_patch_changes_them(acme_api: ApiClient) -> None:
    created(acme_api, split_route("edit"))
    patched = acme_api.patch(
        "/api/v1/routes/edit", {"variants": [{"name": "z", "weight": 0.25, "context": {}}]}
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["variants"] == [{"name": "z", "weight": 0.25, "context": {}}]
    replaced = acme_api.put("/api/v1/routes/edit", {"name": "edit", "context": {}})
    assert replaced.status_code == 200, replaced.content
    assert replaced.json()["variants"] == []


def test_export_and_import_carry_variants(acme_api: ApiClient, globex_api: ApiClient) -> None:
    body = split_route("exported")
    created(acme_api, body)
    exported = acme_api.get("/api/v1/routes/exported/export")
    assert exported.status_code == 200
    document = yaml.safe_load(exported.content)
    (route,) = document["routes"]
    assert [(v["name"], v["weight"]) for v in route["variants"]] == [("b", 0.3), ("c", 0.2)]
    imported = globex_api.post(
        "/api/v1/routes/import", raw=exported.content, content_type="application/yaml"
    )
    assert imported.status_code == 200, imported.content
    assert globex_api.get("/api/v1/routes/exported").json()["variants"] == body["variants"]
    # A document's variant is checked as the route's own context is.
    route["variants"][0]["plugins"][0]["configuration"]["sources"] = [{"type": "nope"}]
    bad = globex_api.post("/api/v1/routes/import", document)
    assert bad.status_code == 400
    assert bad.json()["error"]["param"].startswith("routes[0].variants[0].context.sources[0]")


# --- modes other than live: the arm named, else main --------------------------------------------


def test_a_rerun_runs_the_records_arm_and_a_preview_runs_main(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    from django.db import connection
    from django_tenants.utils import schema_context

    from contextplatform.replay.arrival import await_replay
    from contextplatform.replay.models import ReplayRecord
    from contextplatform.resolve.use_cases import preview_resolve, rerun

    created(
        acme_api,
        split_route("again", [{"name": "b", "weight": 1, "context": {"sources": [RULES]}}]),
    )
    tenant = acme.tenant
    tenant.capture_content = True
    tenant.save()
    try:
        report, arm = resolve(acme_api, "again", user="u1")
    finally:
        connection.set_schema_to_public()
        tenant.capture_content = False
        tenant.save()
    assert arm == "b"
    with schema_context(acme.schema):
        assert await_replay(report["id"])
        record = ReplayRecord.objects.get(pk=report["id"])
        again = rerun(tenant=tenant, record=record)
        assert again.variant == "b"
        assert [o.name for o in again.outcomes] == ["rules"]
        previewed = preview_resolve(
            tenant=tenant,
            route="again",
            request_body=chat(),
            user="u1",
            session=None,
            chat_format=None,
        )
        assert previewed.variant == "main"
        assert [o.name for o in previewed.outcomes] == ["rules", "tone"]
