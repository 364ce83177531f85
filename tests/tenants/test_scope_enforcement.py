"""Every API endpoint and method against the API key's scopes.

The endpoints come from the URL conf itself (``contextplatform/urls_common.py``, served on every
host, which mounts ``urls_api.py`` under ``/api/v1/``), walked with Django's resolver, and the
methods from the handlers each view implements. An endpoint or method added later is covered
automatically, and fails here until it is classified in ``EXPECTED``.

For every (endpoint, method) that needs a scope, a key holding every scope but that one is refused
with 403 in the error envelope, a key holding that scope alone is not refused (whatever the
request then makes of the made-up path parameters and the empty body: 200, 400, 404, never 401,
403 or a 5xx), and no key at all is 401. HEAD reads what GET reads, so it is checked with GET's scope. OPTIONS, which DRF
answers on every API view, only describes the endpoint: it needs a key but no scope. Public
endpoints answer without a key.

The requests run in the test's transaction, which is rolled back: a write that succeeds with the
right scope (e.g. deleting the memories of a user who has none) leaves nothing behind.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tenants.scopes import ALL_SCOPES
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture

# Answers without an API key: the API's schema and docs, liveness, readiness, metrics.
PUBLIC = "public"

ROUTE_READ, ROUTE_WRITE = "routes.read", "routes.write"
MEMORY_READ, MEMORY_WRITE = "memory.read", "memory.write"

# Endpoint (its URL pattern, from the host's root) → method → the scope it needs, or PUBLIC.
EXPECTED: dict[str, dict[str, str]] = {
    "api/v1/resolve": {"POST": "resolve"},
    "api/v1/resolve/<str:resolve_id>/response": {"POST": "resolve"},
    # An application judges the answers to its own resolves with the key it resolves with.
    "api/v1/resolve/<str:resolve_id>/feedback": {"POST": "resolve"},
    # Previewing a route's retrieval reads the route's configuration; it resolves nothing.
    "api/v1/plugins/context/preview": {"POST": ROUTE_READ},
    "api/v1/plugins/context/compression/capabilities": {"GET": "compression.read"},
    "api/v1/plugins/context/compression/health": {"GET": "compression.read"},
    "api/v1/plugins/context/compression/preview": {"POST": "compression.preview"},
    "api/v1/observability/plugins/context/compression/stats": {"GET": "compression.read"},
    # Whoever resolves also serves the model's vsr_context_retrieve calls, with the same key.
    "api/v1/storage/context-recovery/retrieve": {"POST": "resolve"},
    "api/v1/storage/context-recovery/invalidate": {"POST": "compression.manage"},
    "api/v1/routes": {"GET": ROUTE_READ, "POST": ROUTE_WRITE},
    # POST imports a document; the other methods are those of a route named "import".
    "api/v1/routes/import": {
        "GET": ROUTE_READ,
        "POST": ROUTE_WRITE,
        "PUT": ROUTE_WRITE,
        "PATCH": ROUTE_WRITE,
        "DELETE": ROUTE_WRITE,
    },
    "api/v1/routes/<str:name>": {
        "GET": ROUTE_READ,
        "PUT": ROUTE_WRITE,
        "PATCH": ROUTE_WRITE,
        "DELETE": ROUTE_WRITE,
    },
    "api/v1/routes/<str:name>/export": {"GET": ROUTE_READ},
    "api/v1/routes/<str:name>/evals": {"GET": ROUTE_READ, "PUT": ROUTE_WRITE},
    "api/v1/routes/<str:name>/evals/run": {"POST": "evals.run"},
    "api/v1/eval-runs/<str:run>": {"GET": ROUTE_READ},
    # A tenant's own keys: one scope for all of it (a key never grants more than its creator's).
    "api/v1/keys": {"GET": "keys.manage", "POST": "keys.manage"},
    "api/v1/keys/<str:key_id>": {
        "GET": "keys.manage",
        "PATCH": "keys.manage",
        "DELETE": "keys.manage",
    },
    "api/v1/keys/<str:key_id>/rotate": {"POST": "keys.manage"},
    "api/v1/deployments": {"GET": "deployments.read", "POST": "deployments.write"},
    "api/v1/deployments/<str:name>": {
        "GET": "deployments.read",
        "PUT": "deployments.write",
        "PATCH": "deployments.write",
        "DELETE": "deployments.write",
    },
    # MCP servers are configuration the route's sources name: read and written with the routes.
    "api/v1/mcp-servers": {"GET": ROUTE_READ, "POST": ROUTE_WRITE},
    "api/v1/mcp-servers/<str:name>": {"GET": ROUTE_READ, "PUT": ROUTE_WRITE, "DELETE": ROUTE_WRITE},
    "api/v1/replay": {"GET": "replay.read"},
    "api/v1/replay/<str:record_id>": {"GET": "replay.read"},
    # Re-running reads the record; a draft context also asks routes.write (tested in the rerun
    # tests: the draft may call sources).
    "api/v1/replay/<str:record_id>/rerun": {"POST": "replay.read"},
    "api/v1/sources/health": {"GET": "replay.read"},
    "api/v1/spend": {"GET": "replay.read"},
    # A user's profile and sessions are read and written with the memory scopes.
    "api/v1/users/<str:user>/profile": {"GET": MEMORY_READ, "PUT": MEMORY_WRITE},
    "api/v1/users/<str:user>/memories": {
        "GET": MEMORY_READ,
        "POST": MEMORY_WRITE,
        "DELETE": MEMORY_WRITE,
    },
    # Searching only reads, although the query travels in a POST body.
    "api/v1/users/<str:user>/memories/search": {"POST": MEMORY_READ},
    "api/v1/users/<str:user>/memories/export": {"GET": MEMORY_READ},
    "api/v1/users/<str:user>/memories/import": {"POST": MEMORY_WRITE},
    "api/v1/users/<str:user>/memories/<int:memory_id>": {
        "GET": MEMORY_READ,
        "PATCH": MEMORY_WRITE,
        "DELETE": MEMORY_WRITE,
    },
    "api/v1/sessions/<str:session>/messages": {"GET": MEMORY_READ, "POST": MEMORY_WRITE},
    # Pre-warming fetches what the session's next resolve would: whoever resolves may ask for it.
    "api/v1/sessions/<str:session>/prewarm": {"POST": "resolve"},
    # The knowledge base: collections, documents and their ingestion jobs, read or written.
    "api/v1/collections": {"GET": "ingest", "POST": "ingest"},
    "api/v1/collections/<str:name>/documents": {"GET": "ingest", "POST": "ingest"},
    "api/v1/collections/<str:name>/documents/<str:document_id>": {
        "GET": "ingest",
        "DELETE": "ingest",
    },
    "api/v1/jobs/<str:job_id>": {"GET": "ingest"},
    # The gateway resolves (and forwards); listing its models lists the routes a key may call.
    "v1/chat/completions": {"POST": "resolve"},
    "v1/messages": {"POST": "resolve"},
    "v1/models": {"GET": "resolve"},
    "v1/models/<str:model>": {"GET": "resolve"},
    "v1/responses": {"POST": "resolve"},
    "v1/responses/<str:response_id>": {"GET": "resolve", "DELETE": "resolve"},
    "v1/messages/count_tokens": {"POST": "resolve"},
    "": {"GET": PUBLIC},  # the home page: the product and links to its pages
    "api/schema/": {"GET": PUBLIC},
    "api/docs/": {"GET": PUBLIC},
    "healthz": {"GET": PUBLIC},
    "readyz": {"GET": PUBLIC},
    "metrics": {"GET": PUBLIC},
}

# Served on every host; a host's admin site (tests/admin/test_roles.py) is mounted beside it.
URLCONF = "contextplatform.urls_common"
# DRF answers OPTIONS on every API view (checked below); HEAD follows GET.
DERIVED_METHODS = {"OPTIONS", "HEAD"}


def walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(URL pattern from the root, view callback) of every endpoint under ``patterns``."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


def view_methods(callback: Any) -> set[str]:
    """The HTTP methods the view's own handlers implement; a function view is a GET page."""
    view_class = getattr(callback, "view_class", None)
    if view_class is None:
        return {"GET"}
    return {
        name.upper()
        for name in view_class.http_method_names
        if hasattr(view_class, name) and name.upper() not in DERIVED_METHODS
    }


ENDPOINTS: dict[str, Any] = dict(walk(get_resolver(URLCONF).url_patterns))
WALKED: dict[str, set[str]] = {pattern: view_methods(view) for pattern, view in ENDPOINTS.items()}
SCOPED_CASES = [
    (pattern, method)
    for pattern in sorted(WALKED)
    for method in sorted(WALKED[pattern])
    if EXPECTED.get(pattern, {}).get(method) != PUBLIC
]
PUBLIC_CASES = [
    (pattern, method)
    for pattern in sorted(WALKED)
    for method in sorted(WALKED[pattern])
    if EXPECTED.get(pattern, {}).get(method) == PUBLIC
]
API_VIEWS = sorted(
    pattern
    for pattern, methods in WALKED.items()
    if any(EXPECTED.get(pattern, {}).get(method) not in (None, PUBLIC) for method in methods)
)


def expected_scope(pattern: str, method: str) -> str:
    row = EXPECTED.get(pattern)
    assert row is not None, f"{pattern} is served but has no row in EXPECTED: classify it"
    assert method in row, f"{method} {pattern} is served but EXPECTED has no scope for it"
    return row[method]


def concrete_path(pattern: str) -> str:
    """The endpoint with made-up path parameters: whole numbers for ``int``, names otherwise."""

    def value(match: re.Match[str]) -> str:
        converter, name = match.group(1), match.group(2)
        return "404404" if converter == "int" else f"no-such-{name.replace('_', '-')}"

    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", value, pattern)


def call(api: ApiClient, method: str, path: str) -> Any:
    body = {} if method in ("POST", "PUT", "PATCH") else None
    return api.send(method, path, body)


def key_with(acme: TenantFixture, scopes: list[str], name: str) -> ApiClient:
    return ApiClient(issue_api_key(tenant=acme.tenant, scopes=scopes, name=name).plain_key)


# --- every endpoint is classified ----------------------------------------------------------------


def test_every_endpoint_and_method_is_classified() -> None:
    unclassified = sorted(
        f"{method} {pattern}"
        for pattern, methods in WALKED.items()
        for method in methods
        if method not in EXPECTED.get(pattern, {})
    )
    assert not unclassified, (
        f"endpoints without a scope (add them to EXPECTED, as a scope or PUBLIC): {unclassified}"
    )
    stale = sorted(
        f"{method} {pattern}"
        for pattern, row in EXPECTED.items()
        for method in row
        if method not in WALKED.get(pattern, set())
    )
    assert not stale, f"EXPECTED names endpoints or methods nobody serves: {stale}"
    named = {scope for row in EXPECTED.values() for scope in row.values()}
    assert named - {PUBLIC} <= set(ALL_SCOPES), sorted(named - {PUBLIC} - set(ALL_SCOPES))
    assert all(method not in DERIVED_METHODS for row in EXPECTED.values() for method in row)


# --- scoped endpoints ----------------------------------------------------------------------------


# The gateway (``/v1/``) answers in the providers' error shapes, which its clients read; Anthropic's
# has a type where the others have a code, and the platform's code added beside it.
GATEWAY_PREFIX = "/v1/"
ANTHROPIC_PATHS = ("/v1/messages",)
ANTHROPIC_CODES = {"authentication_error": "unauthorized", "permission_error": "forbidden"}


def error_of(response: Any, path: str) -> tuple[str, str]:
    """(code, message) of an error answer, its shape checked: the envelope, or the provider's."""
    body = response.json()
    if path.startswith(ANTHROPIC_PATHS):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message", "code"}, body
        code = body["error"]["code"]
        assert ANTHROPIC_CODES.get(body["error"]["type"], code) == code, body
        return code, body["error"]["message"]
    fields = {"code", "message", "param"} | ({"type"} if path.startswith(GATEWAY_PREFIX) else set())
    assert set(body) == {"error"} and set(body["error"]) == fields, body
    return body["error"]["code"], body["error"]["message"]


def refused_for_scope(response: Any, scope: str, method: str, path: str) -> None:
    assert response.status_code == 403, response.content
    if method == "HEAD":
        return  # no body to read
    code, message = error_of(response, path)
    assert code == "forbidden" and repr(scope) in message, response.content


@pytest.mark.parametrize(("pattern", "method"), SCOPED_CASES)
def test_the_scope_is_required_and_enough(acme: TenantFixture, pattern: str, method: str) -> None:
    scope = expected_scope(pattern, method)
    path = concrete_path(pattern)
    every_other = key_with(acme, [s for s in ALL_SCOPES if s != scope], "all-but-one")
    only_this = key_with(acme, [scope], "just-one")
    methods = [method, "HEAD"] if method == "GET" else [method]
    for sent in methods:
        refused_for_scope(call(every_other, sent, path), scope, sent, path)

        status = call(only_this, sent, path).status_code
        # Anything but a refusal (nor a crash): the made-up parameters may well be a 400 or 404.
        assert status not in (401, 403) and status < 500, f"{sent} {path} with {scope!r}: {status}"

        anonymous = call(ApiClient(None), sent, path)
        assert anonymous.status_code == 401, f"{sent} {path} without a key: {anonymous.status_code}"
        if sent != "HEAD":
            assert error_of(anonymous, path)[0] == "unauthorized"


@pytest.mark.parametrize("pattern", API_VIEWS)
def test_options_needs_a_key_but_no_scope(acme: TenantFixture, pattern: str) -> None:
    path = concrete_path(pattern)
    for scope in ALL_SCOPES:
        status = call(key_with(acme, [scope], f"only-{scope}"), "OPTIONS", path).status_code
        assert status == 200, f"OPTIONS {path} with only {scope!r}: {status}"
    assert call(ApiClient(None), "OPTIONS", path).status_code == 401


# --- public endpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "method"), PUBLIC_CASES)
def test_public_endpoints_answer_without_a_key(db: Any, pattern: str, method: str) -> None:
    assert expected_scope(pattern, method) == PUBLIC
    response = call(ApiClient(None), method, concrete_path(pattern))
    assert response.status_code == 200, (pattern, response.status_code)
