"""Every API error is the JSON envelope ``{"error": {"code", "message", "param"}}``.

Never an HTML page, never a traceback, always the status that fits.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from tenants.services import issue_api_key, revoke_api_key
from tests.conftest import ApiClient, TenantFixture

CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def guardrail_route(name: str = "support") -> dict[str, Any]:
    return {
        "name": name,
        "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be kind."]}]},
    }


def assert_envelope(
    response: Any, status: int, code: str, param: str | None = None
) -> dict[str, Any]:
    """The response is the error envelope with this status and code (and param, when given)."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    text = response.content.decode()
    assert "<html" not in text.lower()
    assert "Traceback" not in text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "param"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    if param is not None:
        assert error["param"] == param, error
    return error


# --- malformed bodies -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/resolve", "/api/v1/routes"])
def test_malformed_json_is_invalid_request(acme_api: ApiClient, path: str) -> None:
    response = acme_api.post(path, raw='{"route": "support", "request": {')
    error = assert_envelope(response, 400, "invalid_request")
    assert "malformed" in error["message"].lower() or "json" in error["message"].lower()


def test_malformed_json_on_put_profile(acme_api: ApiClient) -> None:
    response = acme_api.put("/api/v1/users/u1/profile", raw="{attributes: nope}")
    assert_envelope(response, 400, "invalid_request")


def test_malformed_json_sent_as_form_type_is_still_json_error(acme_api: ApiClient) -> None:
    # curl -d sends application/x-www-form-urlencoded; the body is still parsed as JSON.
    response = acme_api.post(
        "/api/v1/resolve", raw="route=support", content_type="application/x-www-form-urlencoded"
    )
    assert_envelope(response, 400, "invalid_request")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/resolve"),
        ("POST", "/api/v1/routes"),
        ("PUT", "/api/v1/users/u1/profile"),
        ("POST", "/api/v1/sessions/s1/messages"),
    ],
)
def test_json_array_where_object_expected(acme_api: ApiClient, method: str, path: str) -> None:
    response = acme_api.send(method, path, [{"route": "support"}])
    error = assert_envelope(response, 400, "invalid_request")
    assert "object" in error["message"]


def test_json_array_as_route_patch(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    response = acme_api.patch("/api/v1/routes/support", [{"description": "x"}])
    error = assert_envelope(response, 400, "invalid_request")
    assert "object" in error["message"]


def test_request_that_is_not_an_object(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    response = acme_api.post("/api/v1/resolve", {"route": "support", "request": ["hello"]})
    assert_envelope(response, 400, "invalid_request", param="request")


# --- wrong types, the offending field named -------------------------------------------------


def test_wrong_role_type_names_the_field(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    body = {"route": "support", "request": {"messages": [{"role": 5, "content": "hi"}]}}
    error = assert_envelope(
        acme_api.post("/api/v1/resolve", body), 400, "invalid_request", "request.messages[0].role"
    )
    assert error["message"].startswith("request.messages[0].role")


def test_unknown_role_names_the_later_message(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "wizard", "content": "x"},
    ]
    response = acme_api.post(
        "/api/v1/resolve", {"route": "support", "request": {"messages": messages}}
    )
    assert_envelope(response, 400, "invalid_request", "request.messages[2].role")


def test_resolve_missing_route_field(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/resolve", {"request": CHAT})
    error = assert_envelope(response, 400, "invalid_request", "route")
    assert "required" in error["message"]


def test_resolve_route_of_wrong_type(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/resolve", {"route": ["support"], "request": CHAT})
    assert_envelope(response, 400, "invalid_request", "route")


def test_resolve_unknown_top_level_field(acme_api: ApiClient) -> None:
    response = acme_api.post(
        "/api/v1/resolve", {"route": "support", "request": CHAT, "tenant": "globex"}
    )
    error = assert_envelope(response, 400, "invalid_request", "tenant")
    assert "unknown field" in error["message"]


def test_resolve_bad_format_value(acme_api: ApiClient) -> None:
    response = acme_api.post(
        "/api/v1/resolve", {"route": "support", "format": "gemini", "request": CHAT}
    )
    assert_envelope(response, 400, "invalid_request", "format")


def test_route_source_priority_as_string(acme_api: ApiClient) -> None:
    route = guardrail_route()
    route["context"]["sources"][0]["priority"] = "high"
    error = assert_envelope(
        acme_api.post("/api/v1/routes", route),
        400,
        "invalid_request",
        "context.sources[0].priority",
    )
    assert error["message"].startswith("context.sources[0].priority")
    assert acme_api.get("/api/v1/routes/support").status_code == 404


@pytest.mark.parametrize("value", ["100", True, 10.0, None, [1]])
def test_route_source_priority_of_another_json_type(acme_api: ApiClient, value: Any) -> None:
    # JSON carries types: a numeric string, a boolean or a float is not an integer priority.
    route = guardrail_route()
    route["context"]["sources"][0]["priority"] = value
    assert_envelope(
        acme_api.post("/api/v1/routes", route),
        400,
        "invalid_request",
        "context.sources[0].priority",
    )


@pytest.mark.parametrize(
    ("context", "param"),
    [
        ({"enabled": "yes"}, "context.enabled"),
        ({"budget": {"max_tokens": "4000"}}, "context.budget.max_tokens"),
        ({"budget": {"context_tokens": "50"}}, "context.budget.context_tokens"),
    ],
)
def test_route_context_values_of_another_json_type(
    acme_api: ApiClient, context: dict[str, Any], param: str
) -> None:
    route = {"name": "support", "context": context}
    error = assert_envelope(acme_api.post("/api/v1/routes", route), 400, "invalid_request", param)
    assert error["message"].startswith(param)


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ({"messages": 5}, "request.messages"),
        ({"messages": "hello"}, "request.messages"),
        ({"messages": [1]}, "request.messages[0]"),
        ({"messages": [{"role": "user", "content": 5}]}, "request.messages[0].content"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "512"},
            "request.max_tokens",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "request.max_tokens"),
        (
            {"system": "s", "messages": [{"role": "user", "content": [{"text": "no type"}]}]},
            "request.messages[0].content",
        ),
        (
            {"system": "s", "messages": [{"role": "system", "content": "x"}]},
            "request.messages[0].role",
        ),
    ],
)
def test_chat_request_wrong_types_name_a_real_field(
    acme_api: ApiClient, request_body: dict[str, Any], param: str
) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    response = acme_api.post("/api/v1/resolve", {"route": "support", "request": request_body})
    error = assert_envelope(response, 400, "invalid_request")
    # The param is a path into the caller's body (no pydantic union branch names like ".str").
    assert error["param"] == param or error["param"].startswith(param + "["), error
    assert error["message"].startswith(error["param"])


def test_route_second_source_wrong_type_names_its_index(acme_api: ApiClient) -> None:
    route = guardrail_route()
    route["context"]["sources"].append({"type": "user_profile", "timeout_ms": "soon"})
    assert_envelope(
        acme_api.post("/api/v1/routes", route),
        400,
        "invalid_request",
        "context.sources[1].timeout_ms",
    )


def test_route_model_wrong_type(acme_api: ApiClient) -> None:
    route = {**guardrail_route(), "model": {"context_window": "big"}}
    assert_envelope(
        acme_api.post("/api/v1/routes", route), 400, "invalid_request", "model.context_window"
    )


def test_route_sources_not_a_list(acme_api: ApiClient) -> None:
    route = {"name": "support", "context": {"sources": {"type": "skill_guardrails"}}}
    assert_envelope(
        acme_api.post("/api/v1/routes", route), 400, "invalid_request", "context.sources"
    )


def test_route_bad_on_failure(acme_api: ApiClient) -> None:
    route = guardrail_route()
    route["context"]["sources"][0]["on_failure"] = "explode"
    assert_envelope(
        acme_api.post("/api/v1/routes", route),
        400,
        "invalid_request",
        "context.sources[0].on_failure",
    )


def test_route_bad_name(acme_api: ApiClient) -> None:
    assert_envelope(
        acme_api.post("/api/v1/routes", guardrail_route("has spaces/slash")),
        400,
        "invalid_request",
        "name",
    )


# --- unknown fields and types in a route config ---------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "param", "field"),
    [
        (lambda r: r["context"].update(bogus=1), "context.bogus", "bogus"),
        (lambda r: r.update(colour="blue"), "colour", "colour"),
        (
            lambda r: r["context"]["sources"][0].update(textz=["x"]),
            "context.sources[0].textz",
            "textz",
        ),
        (
            lambda r: r["context"].update(budget={"max_tokenz": 5}),
            "context.budget.max_tokenz",
            "max_tokenz",
        ),
        (lambda r: r.update(model={"windw": 5}), "model.windw", "windw"),
    ],
)
def test_unknown_route_field_refused_in_one_line(
    acme_api: ApiClient, mutate: Any, param: str, field: str
) -> None:
    route = guardrail_route()
    mutate(route)
    error = assert_envelope(acme_api.post("/api/v1/routes", route), 400, "invalid_request", param)
    assert "\n" not in error["message"]
    assert field in error["message"]
    assert "unknown field" in error["message"]
    assert acme_api.get("/api/v1/routes/support").status_code == 404


def test_unknown_field_refused_on_put_and_patch(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    put = {"context": {"sources": [], "extra_thing": True}}
    error = assert_envelope(acme_api.put("/api/v1/routes/support", put), 400, "invalid_request")
    assert error["param"] == "context.extra_thing"
    patch = {"context": {"injection": {"mode": "system_prompt", "style": "fancy"}}}
    error = assert_envelope(acme_api.patch("/api/v1/routes/support", patch), 400, "invalid_request")
    assert error["param"] == "context.injection.style"
    # Neither refused change was stored.
    stored = acme_api.get("/api/v1/routes/support").json()
    assert stored["effective_context"]["injection"]["mode"] == "tool_role"
    assert stored["effective_context"]["sources"][0]["texts"] == ["Be kind."]


def test_unknown_source_type(acme_api: ApiClient) -> None:
    route = {"name": "support", "context": {"sources": [{"type": "crystal_ball"}]}}
    error = assert_envelope(
        acme_api.post("/api/v1/routes", route), 400, "invalid_request", "context.sources[0].type"
    )
    assert "crystal_ball" in error["message"]
    assert "skill_guardrails" in error["message"]  # the known kinds are listed


def test_source_without_type(acme_api: ApiClient) -> None:
    route = {"name": "support", "context": {"sources": [{"name": "x"}]}}
    assert_envelope(
        acme_api.post("/api/v1/routes", route), 400, "invalid_request", "context.sources[0].type"
    )


# --- unknown route, authentication, scopes --------------------------------------------------


def test_unknown_route_on_resolve(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/resolve", {"route": "nope", "request": CHAT})
    error = assert_envelope(response, 404, "not_found", "route")
    assert "nope" in error["message"]


def test_unknown_route_on_get(acme_api: ApiClient) -> None:
    assert_envelope(acme_api.get("/api/v1/routes/nope"), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/resolve"),
        ("GET", "/api/v1/routes"),
        ("GET", "/api/v1/replay"),
        ("GET", "/api/v1/users/u1/profile"),
        ("POST", "/api/v1/sessions/s1/messages"),
    ],
)
def test_missing_key_is_unauthorized(anonymous_api: ApiClient, method: str, path: str) -> None:
    response = anonymous_api.send(method, path, {"route": "support", "request": CHAT})
    assert_envelope(response, 401, "unauthorized")
    assert "Bearer" in response["WWW-Authenticate"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer cp_not-a-real-key"},
        {"X-Api-Key": "cp_not-a-real-key"},
        {"Authorization": "Bearer "},
    ],
)
def test_invalid_key_is_unauthorized(anonymous_api: ApiClient, headers: dict[str, str]) -> None:
    response = anonymous_api.get("/api/v1/routes", headers=headers)
    assert_envelope(response, 401, "unauthorized")


def test_revoked_key_is_unauthorized(acme: TenantFixture) -> None:
    issued = issue_api_key(tenant=acme.tenant, name="to-revoke")
    api = ApiClient(issued.plain_key)
    assert api.get("/api/v1/routes").status_code == 200
    revoke_api_key(api_key=issued.api_key)
    assert_envelope(api.get("/api/v1/routes"), 401, "unauthorized")


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("GET", "/api/v1/routes", "routes.read"),
        ("POST", "/api/v1/routes", "routes.write"),
        ("GET", "/api/v1/replay", "replay.read"),
        ("PUT", "/api/v1/users/u1/profile", "memory.write"),
        ("GET", "/api/v1/sessions/s1/messages", "memory.read"),
    ],
)
def test_key_without_scope_is_forbidden(
    acme: TenantFixture, method: str, path: str, scope: str
) -> None:
    narrow = ApiClient(issue_api_key(tenant=acme.tenant, scopes="resolve", name="narrow").plain_key)
    response = narrow.send(method, path, {"attributes": {}} if method != "GET" else None)
    error = assert_envelope(response, 403, "forbidden")
    assert scope in error["message"]


def test_scoped_key_can_do_its_scope_only(acme: TenantFixture, acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    resolver = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes="resolve", name="narrow").plain_key
    )
    assert (
        resolver.post("/api/v1/resolve", {"route": "support", "request": CHAT}).status_code == 200
    )
    reader = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes="routes.read", name="reader").plain_key
    )
    assert reader.get("/api/v1/routes/support").status_code == 200
    assert_envelope(
        reader.post("/api/v1/resolve", {"route": "support", "request": CHAT}), 403, "forbidden"
    )
    assert_envelope(reader.delete("/api/v1/routes/support"), 403, "forbidden")
    assert acme_api.get("/api/v1/routes/support").status_code == 200


# --- size limit -----------------------------------------------------------------------------


@override_settings(API_MAX_BODY_BYTES=1000, DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/resolve"),
        ("POST", "/api/v1/routes"),
        ("PUT", "/api/v1/users/u1/profile"),
    ],
)
def test_body_over_limit_is_413(acme_api: ApiClient, method: str, path: str) -> None:
    big = {"route": "support", "request": {"messages": [{"role": "user", "content": "x" * 2000}]}}
    error = assert_envelope(acme_api.send(method, path, big), 413, "payload_too_large")
    assert "1000" in error["message"]


@override_settings(API_MAX_BODY_BYTES=1000, DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_body_under_limit_passes(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", guardrail_route()).status_code == 201
    small = {"route": "support", "request": {"messages": [{"role": "user", "content": "x" * 100}]}}
    assert acme_api.post("/api/v1/resolve", small).status_code == 200


@override_settings(API_MAX_BODY_BYTES=1000, DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_body_over_limit_without_key_is_still_413_envelope(anonymous_api: ApiClient) -> None:
    response = anonymous_api.post("/api/v1/resolve", raw="y" * 5000)
    assert_envelope(response, 413, "payload_too_large")


# --- unknown paths and methods --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/routes/a/b/c", "/api/v2/resolve"])
def test_unknown_api_path_is_404_envelope(
    acme_api: ApiClient, anonymous_api: ApiClient, path: str
) -> None:
    for api in (acme_api, anonymous_api):
        assert_envelope(api.get(path), 404, "not_found")
        assert_envelope(api.post(path, {"a": 1}), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/resolve"),
        ("DELETE", "/api/v1/resolve"),
        ("PUT", "/api/v1/routes"),
        ("DELETE", "/api/v1/replay"),
        ("POST", "/api/v1/users/u1/profile"),
        ("GET", "/api/v1/resolve/rsv_x/response"),
    ],
)
def test_method_not_allowed_is_405_envelope(acme_api: ApiClient, method: str, path: str) -> None:
    response = acme_api.send(method, path, {"a": 1} if method != "GET" else None)
    error = assert_envelope(response, 405, "method_not_allowed")
    assert method in error["message"]


def test_a_route_with_several_problems_names_the_first_and_keeps_the_rest(
    acme_api: ApiClient,
) -> None:
    """The envelope reports the first problem; the check found them all (one per field), which
    is what the admin form shows next to each field."""
    from contextplatform.core.errors import ApiError
    from contextplatform.routes.configuration.schema import validate_route_spec

    route = {
        "name": "several",
        "model": {"context_window": 100},
        "context": {
            "budget": {"context_tokens": 0},
            "sources": [
                {"type": "skill_guardrails", "texts": ["Be kind."], "priority": -1},
                {"type": "recent_messages", "last_n_turns": 0},
                {"type": "skill_guardrails", "texts": ["Once."]},
                {"type": "skill_guardrails", "texts": ["Twice."]},
            ],
        },
    }
    response = acme_api.post("/api/v1/routes", route)
    assert_envelope(response, 400, "invalid_request", "model.context_window")
    with pytest.raises(ApiError) as raised:
        validate_route_spec(route)
    assert [error.param for error in raised.value.every()] == [
        "model.context_window",
        "context.budget.context_tokens",
        "context.sources[0].priority",
        "context.sources[1].last_n_turns",
        "context.sources[3].name",
    ]
    assert "duplicate source name" in raised.value.every()[-1].message
