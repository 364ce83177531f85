"""Routes CRUD: statuses, merge patch, replace, conflicts, defaults, duplicate sources."""

from __future__ import annotations

from typing import Any

from django_tenants.utils import schema_context

from contextplatform.routes.models import Route
from tests.conftest import ApiClient, TenantFixture


def full_route(name: str = "support") -> dict[str, Any]:
    return {
        "name": name,
        "description": "Customer support",
        "model": {"name": "gpt-4o-mini", "context_window": 32_000, "max_output_tokens": 1024},
        "context": {
            "sources": [
                {"type": "skill_guardrails", "name": "rules", "texts": ["Never promise refunds."]},
                {"type": "user_profile", "timeout_ms": 300, "on_failure": "warn"},
                {"type": "recent_messages", "last_n_turns": 4},
            ],
            "budget": {"context_tokens": 2000},
            "injection": {"mode": "system_prompt"},
        },
    }


def sources_by_type(route: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {source["type"]: source for source in route["effective_context"]["sources"]}


def test_create_read_list_delete(acme_api: ApiClient) -> None:
    created = acme_api.post("/api/v1/routes", full_route())
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "support"
    assert body["description"] == "Customer support"
    assert body["model"]["context_window"] == 32_000
    assert body["model"]["max_output_tokens"] == 1024
    assert body["context"]["injection"]["mode"] == "system_prompt"
    assert body["context"]["budget"]["context_tokens"] == 2000
    assert body["created_at"] and body["updated_at"]

    fetched = acme_api.get("/api/v1/routes/support")
    assert fetched.status_code == 200
    assert fetched.json()["context"] == body["context"]
    assert fetched.json()["model"] == body["model"]

    assert acme_api.post("/api/v1/routes", full_route("billing")).status_code == 201
    listed = acme_api.get("/api/v1/routes")
    assert listed.status_code == 200
    assert [r["name"] for r in listed.json()["data"]] == ["billing", "support"]

    deleted = acme_api.delete("/api/v1/routes/support")
    assert deleted.status_code == 204
    assert deleted.content == b""
    gone = acme_api.get("/api/v1/routes/support")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"
    assert acme_api.delete("/api/v1/routes/support").status_code == 404
    assert [r["name"] for r in acme_api.get("/api/v1/routes").json()["data"]] == ["billing"]


def test_route_is_stored_in_the_tenant_schema(acme: TenantFixture, acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    with schema_context(acme.schema):
        route = Route.objects.get(name="support")
        assert route.context_window == 32_000
        assert route.max_output_tokens == 1024
        spec = route.spec()
    assert [s.type for s in spec.context.sources] == [
        "skill_guardrails",
        "user_profile",
        "recent_messages",
    ]


def test_duplicate_name_is_409(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    again = acme_api.post("/api/v1/routes", {"name": "support"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert again.json()["error"]["param"] == "name"
    # The original is unchanged.
    assert acme_api.get("/api/v1/routes/support").json()["description"] == "Customer support"


def test_rename_onto_existing_name_is_409(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route("a")).status_code == 201
    assert acme_api.post("/api/v1/routes", full_route("b")).status_code == 201
    response = acme_api.patch("/api/v1/routes/a", {"name": "b"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert acme_api.get("/api/v1/routes/a").status_code == 200


def test_defaults_are_filled(acme_api: ApiClient) -> None:
    minimal = {
        "name": "minimal",
        "context": {
            "sources": [
                {"type": "skill_guardrails"},
                {"type": "user_profile"},
                {"type": "recent_messages"},
            ]
        },
    }
    response = acme_api.post("/api/v1/routes", minimal)
    assert response.status_code == 201, response.content
    route = response.json()
    sources = sources_by_type(route)
    assert sources["skill_guardrails"]["priority"] == 100
    assert sources["user_profile"]["priority"] == 80
    assert sources["recent_messages"]["priority"] == 60
    for source in sources.values():
        assert source["on_failure"] == "skip"
        assert source["enabled"] is True
    assert sources["recent_messages"]["last_n_turns"] == 6
    assert route["effective_context"]["enabled"] is True
    assert route["effective_context"]["injection"]["mode"] == "tool_role"
    assert route["effective_context"]["budget"]["max_tokens"] == "auto"
    assert route["model"]["context_window"] == 128_000
    assert route["description"] == ""
    # The defaults are stored, not only shown.
    assert (
        acme_api.get("/api/v1/routes/minimal").json()["effective_context"]
        == route["effective_context"]
    )


def test_route_with_only_a_name(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/routes", {"name": "bare"})
    assert response.status_code == 201
    assert response.json()["effective_context"]["sources"] == []


def test_explicit_priority_is_kept(acme_api: ApiClient) -> None:
    route = {"name": "custom", "context": {"sources": [{"type": "user_profile", "priority": 55}]}}
    response = acme_api.post("/api/v1/routes", route)
    assert response.status_code == 201
    assert response.json()["context"]["sources"][0]["priority"] == 55


def test_duplicate_source_names_refused(acme_api: ApiClient) -> None:
    same_type = {
        "name": "dup",
        "context": {
            "sources": [{"type": "skill_guardrails", "texts": ["a"]}, {"type": "skill_guardrails"}]
        },
    }
    response = acme_api.post("/api/v1/routes", same_type)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["param"] == "context.sources[1].name"
    assert "duplicate" in error["message"]

    same_name = {
        "name": "dup",
        "context": {
            "sources": [
                {"type": "skill_guardrails", "name": "ctx"},
                {"type": "user_profile", "name": "other"},
                {"type": "recent_messages", "name": "ctx"},
            ]
        },
    }
    response = acme_api.post("/api/v1/routes", same_name)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "context.sources[2].name"
    assert acme_api.get("/api/v1/routes/dup").status_code == 404

    # Two sources of one kind are fine once each has its own name.
    named = {
        "name": "dup",
        "context": {
            "sources": [
                {"type": "skill_guardrails", "name": "a"},
                {"type": "skill_guardrails", "name": "b"},
            ]
        },
    }
    assert acme_api.post("/api/v1/routes", named).status_code == 201


def test_duplicate_source_names_refused_on_put_and_patch(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    dup_sources = [{"type": "user_profile"}, {"type": "user_profile"}]
    put = acme_api.put("/api/v1/routes/support", {"context": {"sources": dup_sources}})
    assert put.status_code == 400
    assert put.json()["error"]["param"] == "context.sources[1].name"
    patch = acme_api.patch("/api/v1/routes/support", {"context": {"sources": dup_sources}})
    assert patch.status_code == 400
    assert len(acme_api.get("/api/v1/routes/support").json()["context"]["sources"]) == 3


def test_put_replaces_the_whole_route(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    replacement = {"context": {"sources": [{"type": "user_profile", "priority": 70}]}}
    response = acme_api.put("/api/v1/routes/support", replacement)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == "support"  # taken from the path
    # Everything not sent is back to its default: PUT is not a merge.
    assert body["description"] == ""
    assert body["model"]["context_window"] == 128_000
    assert body["model"]["max_output_tokens"] is None
    assert body["effective_context"]["injection"]["mode"] == "tool_role"
    assert body["effective_context"]["budget"]["context_tokens"] is None
    assert [(s["type"], s["priority"]) for s in body["effective_context"]["sources"]] == [
        ("user_profile", 70)
    ]
    assert (
        acme_api.get("/api/v1/routes/support").json()["effective_context"]
        == body["effective_context"]
    )


def test_put_unknown_route_is_404(acme_api: ApiClient) -> None:
    response = acme_api.put("/api/v1/routes/ghost", {"context": {"sources": []}})
    assert response.status_code == 404
    assert acme_api.get("/api/v1/routes/ghost").status_code == 404


def test_put_invalid_body_keeps_the_route(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    response = acme_api.put("/api/v1/routes/support", {"model": {"context_window": 10}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "model.context_window"
    assert acme_api.get("/api/v1/routes/support").json()["model"]["context_window"] == 32_000


def test_patch_is_a_json_merge_patch(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    patch = {
        "description": "Changed",
        "model": {"max_output_tokens": None},  # null removes a member (back to its default)
        "context": {"injection": {"mode": "tool_role"}, "budget": None},
    }
    response = acme_api.patch("/api/v1/routes/support", patch)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["description"] == "Changed"
    # Members not named in the patch are kept...
    assert body["model"]["name"] == "gpt-4o-mini"
    assert body["model"]["context_window"] == 32_000
    assert [s["type"] for s in body["effective_context"]["sources"]] == [
        "skill_guardrails",
        "user_profile",
        "recent_messages",
    ]
    assert sources_by_type(body)["user_profile"]["on_failure"] == "warn"
    # ... the named ones are replaced, and null removes.
    assert body["model"]["max_output_tokens"] is None
    assert body["effective_context"]["injection"]["mode"] == "tool_role"
    assert body["effective_context"]["budget"]["context_tokens"] is None
    assert acme_api.get("/api/v1/routes/support").json() | {"updated_at": None} == body | {
        "updated_at": None
    }


def test_patch_replaces_arrays_whole(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    response = acme_api.patch(
        "/api/v1/routes/support",
        {"context": {"sources": [{"type": "skill_guardrails", "texts": ["only"]}]}},
    )
    assert response.status_code == 200
    sources = response.json()["effective_context"]["sources"]
    assert len(sources) == 1
    assert sources[0]["texts"] == ["only"]
    assert sources[0]["priority"] == 100


def test_patch_can_rename(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    response = acme_api.patch("/api/v1/routes/support", {"name": "helpdesk"})
    assert response.status_code == 200
    assert acme_api.get("/api/v1/routes/support").status_code == 404
    assert acme_api.get("/api/v1/routes/helpdesk").json()["description"] == "Customer support"


def test_patch_unknown_route_is_404(acme_api: ApiClient) -> None:
    assert acme_api.patch("/api/v1/routes/ghost", {"description": "x"}).status_code == 404


def test_patch_invalid_result_keeps_the_route(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    response = acme_api.patch("/api/v1/routes/support", {"model": {"max_output_tokens": 64_000}})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert acme_api.get("/api/v1/routes/support").json()["model"]["max_output_tokens"] == 1024


def test_updated_route_is_used_by_resolve(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", full_route()).status_code == 201
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    before = acme_api.post("/api/v1/resolve", {"route": "support", "request": chat}).json()
    assert "Never promise refunds." in before["request"]["messages"][0]["content"]
    patch = {
        "context": {
            "sources": [{"type": "skill_guardrails", "name": "rules", "texts": ["Be brief."]}]
        }
    }
    assert acme_api.patch("/api/v1/routes/support", patch).status_code == 200
    after = acme_api.post("/api/v1/resolve", {"route": "support", "request": chat}).json()
    system = after["request"]["messages"][0]["content"]
    assert "Be brief." in system
    assert "Never promise refunds." not in system
    assert acme_api.delete("/api/v1/routes/support").status_code == 204
    assert (
        acme_api.post("/api/v1/resolve", {"route": "support", "request": chat}).status_code == 404
    )
