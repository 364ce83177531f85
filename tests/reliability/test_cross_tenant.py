"""Cross-tenant and cross-user probes, generated from the URL configuration.

Every API endpoint and method (walked from the URL conf as ``tests/tenants/test_scope_enforcement``
walks it: ``urls_api.py`` under ``/api/v1/`` and the gateway's ``/v1/`` paths) is called with
acme's key and the ids of resources that exist only in globex: its route, deployment, MCP server,
collection, document, ingestion job, user (profile, memories), session, replay record and
recovery blob. A call that names a resource by its path (``ABSENT``) must be a 404; a call that
addresses acme's own namespace with globex's names (``OWN``: a user's memories, a session's
messages, creating a route of the same name) may succeed, on acme's data. Neither may answer with
anything of globex's (no marker of its content in the body; listings without its names), and
globex's schema, every table of it, is the same after the call as before. An endpoint or method
added to the URL conf without a probe here fails ``test_every_endpoint_has_a_probe``.

Within one tenant, user-scoped resources (memories, sessions, profiles, recovery blobs) are probed
the same way: ann's ids with bob named, ann's rows unchanged.

Each call runs in a savepoint rolled back after it (what one call writes in acme, a route of the
same name for one, must not answer the next one), and the kept configuration is dropped with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.db import transaction
from django.utils import timezone
from django_tenants.utils import schema_context

from compression.models import RecoveryBlob
from contextplatform.core import config_cache
from contextplatform.gateway.response_store import keep_response
from tests.conftest import ApiClient, TenantFixture
from tests.reliability.probes import Snapshot, snapshot
from tests.tenants.test_scope_enforcement import EXPECTED, PUBLIC, WALKED

SECRET = "GLOBEX-SECRET-7c1e"  # in every resource globex owns; never in an answer to acme
ANN_SECRET = "ANN-ONLY-5d2b"  # in every resource ann owns; never in an answer naming bob


@dataclass(frozen=True)
class Owned:
    """One of each resource, all owned by one tenant (and one user of it)."""

    route: str
    deployment: str
    mcp_server: str
    collection: str
    document: str
    job: str
    user: str
    session: str
    memory: int
    record: str
    recovery_request: str
    recovery_key: str
    eval_run: str
    response: str  # a response the gateway kept (``POST /v1/responses``)
    key: str  # the id of a key of the tenant's (in the public schema, with every tenant's)
    key_name: str

    def names(self) -> list[str]:
        """What a listing must not show: every name and id, but the made-up user and session
        (``u_…`` and ``s_…`` are common enough to appear in acme's own answers)."""
        return [
            self.route,
            self.deployment,
            self.mcp_server,
            self.collection,
            self.record,
            self.key_name,
        ]


def chat(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def created(response: Any, status: int = 201) -> Any:
    assert response.status_code == status, response.content
    return response.json()


def own_everything(
    api: ApiClient, schema: str, user: str, secret: str, tag: str, *, route_text: str = ""
) -> Owned:
    """One of each resource in ``schema``, through its owner's API (the recovery blob, which only
    a compressed resolve writes, through the ORM). The route's guardrail is ``route_text``, else
    the secret (a resolve of another user of the same tenant gets the guardrail, rightly)."""
    route, deployment, mcp_server = f"{tag}-route", f"{tag}-deployment", f"{tag}-mcp"
    collection, document, session = f"{tag}-docs", f"{tag}-doc", f"s_{tag}"
    created(
        api.post(
            "/api/v1/deployments",
            {
                "name": deployment,
                "protocol": "openai",
                "base_url": "https://models.example.com/v1",
                "model": f"model-{secret}",
                "api_key": f"sk-{secret}",
            },
        )
    )
    created(
        api.post(
            "/api/v1/mcp-servers",
            {
                "name": mcp_server,
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": f"Bearer {secret}"},
            },
        )
    )
    created(api.post("/api/v1/collections", {"name": collection, "description": secret}))
    job = created(
        api.post(
            f"/api/v1/collections/{collection}/documents",
            {"documents": [{"id": document, "title": secret, "text": f"Refunds: {secret}."}]},
        ),
        202,
    )["job"]
    created(
        api.post(
            "/api/v1/routes",
            {
                "name": route,
                "description": route_text or secret,
                "context": {
                    "sources": [
                        {"type": "skill_guardrails", "texts": [route_text or secret]},
                        {"type": "user_profile"},
                        {"type": "recent_messages", "last_n_turns": 10},
                    ],
                    "injection": {"mode": "system_prompt"},
                },
            },
        )
    )
    created(api.put(f"/api/v1/users/{user}/profile", {"attributes": {"secret": secret}}), 200)
    memory = created(api.post(f"/api/v1/users/{user}/memories", {"content": f"likes {secret}"}))
    created(
        api.post(
            f"/api/v1/sessions/{session}/messages",
            {"user": user, "messages": [{"role": "user", "content": secret}]},
        )
    )
    record = created(
        api.post(
            "/api/v1/resolve",
            {"route": route, "user": user, "session": session, "request": chat(secret)},
        ),
        200,
    )["id"]
    cases = [{"id": "c1", "query": secret, "user": user, "expect": {"text_containing": [secret]}}]
    created(api.put(f"/api/v1/routes/{route}/evals", {"cases": cases}), 200)
    eval_run = created(api.post(f"/api/v1/routes/{route}/evals/run"), 202)["run"]
    key_name = f"{tag}-key-{secret}"
    key = created(api.post("/api/v1/keys", {"name": key_name, "scopes": ["resolve"]}))["id"]
    with schema_context(schema):
        RecoveryBlob.objects.create(
            request_id=record,
            route=route,
            user_id=user,
            key="k1",
            content=f"original {secret}",
            size_bytes=64,
            expires_at=timezone.now() + timedelta(hours=1),
        )
        response = f"resp_{tag}_kept"
        said = [{"type": "message", "role": "user", "content": secret}]
        keep_response(
            response,
            user=user,
            route=route,
            items=said,
            response={"id": response, "object": "response", "output": said},
            capture_content=True,
        )
    return Owned(
        route=route,
        deployment=deployment,
        mcp_server=mcp_server,
        collection=collection,
        document=document,
        job=job,
        user=user,
        session=session,
        memory=memory["id"],
        record=record,
        recovery_request=record,
        recovery_key="k1",
        eval_run=eval_run,
        response=response,
        key=key,
        key_name=key_name,
    )


# --- the probes ----------------------------------------------------------------------------------

ABSENT = "absent"  # names the other tenant's (or user's) resource: 404
OWN = "own"  # the caller's own namespace under the other's names: anything but a 5xx or a leak


@dataclass(frozen=True)
class Probe:
    expect: str
    params: Callable[[Owned], dict[str, Any]] = lambda o: {}
    body: Callable[[Owned], Any] | None = None
    query: Callable[[Owned], dict[str, str]] = lambda o: {}


def route_param(o: Owned) -> dict[str, Any]:
    return {"name": o.route}


def user_param(o: Owned) -> dict[str, Any]:
    return {"user": o.user}


def session_param(o: Owned) -> dict[str, Any]:
    return {"session": o.session}


def memory_params(o: Owned) -> dict[str, Any]:
    return {"user": o.user, "memory_id": o.memory}


def collection_param(o: Owned) -> dict[str, Any]:
    return {"name": o.collection}


def document_params(o: Owned) -> dict[str, Any]:
    return {"name": o.collection, "document_id": o.document}


def route_spec(o: Owned) -> dict[str, Any]:
    return {"name": o.route, "description": "hijacked", "context": {"sources": []}}


def deployment_spec(o: Owned) -> dict[str, Any]:
    return {
        "name": o.deployment,
        "protocol": "openai",
        "base_url": "https://hijack.example.com/v1",
        "model": "hijacked",
    }


def mcp_spec(o: Owned) -> dict[str, Any]:
    return {"name": o.mcp_server, "url": "https://hijack.example.com/mcp"}


ANSWER = {"choices": [{"message": {"role": "assistant", "content": "hijacked"}}]}
DOCUMENTS = {"documents": [{"id": "hijack", "text": "hijacked"}]}

# Endpoint (its URL pattern, from the host's root, as the scope test names it) → method → probe.
PROBES: dict[str, dict[str, Probe]] = {
    "api/v1/resolve": {
        "POST": Probe(
            ABSENT,
            body=lambda o: {
                "route": o.route,
                "user": o.user,
                "session": o.session,
                "request": chat("hi"),
            },
        )
    },
    "api/v1/resolve/<str:resolve_id>/feedback": {
        "POST": Probe(ABSENT, lambda o: {"resolve_id": o.record}, lambda o: {"score": -1})
    },
    "api/v1/resolve/<str:resolve_id>/response": {
        "POST": Probe(ABSENT, lambda o: {"resolve_id": o.record}, lambda o: {"response": ANSWER})
    },
    "api/v1/plugins/context/preview": {
        "POST": Probe(ABSENT, body=lambda o: {"route": o.route, "query": "refund", "user": o.user})
    },
    "api/v1/plugins/context/compression/capabilities": {"GET": Probe(OWN)},
    "api/v1/plugins/context/compression/health": {"GET": Probe(OWN)},
    "api/v1/plugins/context/compression/preview": {
        "POST": Probe(ABSENT, body=lambda o: {"route": o.route, "request_body": chat("hi")})
    },
    "api/v1/observability/plugins/context/compression/stats": {"GET": Probe(OWN)},
    "api/v1/storage/context-recovery/retrieve": {
        "POST": Probe(
            ABSENT,
            body=lambda o: {
                "request_id": o.recovery_request,
                "key": o.recovery_key,
                "route": o.route,
                "user": o.user,
            },
        )
    },
    "api/v1/storage/context-recovery/invalidate": {
        "POST": Probe(
            OWN,
            body=lambda o: {"route": o.route, "user": o.user, "request_id": o.recovery_request},
        )
    },
    "api/v1/routes": {"GET": Probe(OWN), "POST": Probe(OWN, body=route_spec)},
    # POST imports a document (acme's own routes); the others are a route named "import".
    "api/v1/routes/import": {
        "GET": Probe(OWN),
        "POST": Probe(OWN, body=lambda o: {"routes": [route_spec(o)]}),
        "PUT": Probe(OWN, body=route_spec),
        "PATCH": Probe(OWN, body=lambda o: {"description": "hijacked"}),
        "DELETE": Probe(OWN),
    },
    "api/v1/routes/<str:name>": {
        "GET": Probe(ABSENT, route_param),
        "PUT": Probe(ABSENT, route_param, route_spec),
        "PATCH": Probe(ABSENT, route_param, lambda o: {"description": "hijacked"}),
        "DELETE": Probe(ABSENT, route_param),
    },
    "api/v1/routes/<str:name>/export": {"GET": Probe(ABSENT, route_param)},
    "api/v1/routes/<str:name>/evals": {
        "GET": Probe(ABSENT, route_param),
        "PUT": Probe(
            ABSENT,
            route_param,
            lambda o: {"cases": [{"id": "x", "query": "hijacked", "expect": {"documents": ["d"]}}]},
        ),
    },
    "api/v1/routes/<str:name>/evals/run": {"POST": Probe(ABSENT, route_param)},
    "api/v1/eval-runs/<str:run>": {"GET": Probe(ABSENT, lambda o: {"run": o.eval_run})},
    "api/v1/keys": {
        "GET": Probe(OWN),
        "POST": Probe(OWN, body=lambda o: {"name": "hijacked", "scopes": ["resolve"]}),
    },
    "api/v1/keys/<str:key_id>": {
        "GET": Probe(ABSENT, lambda o: {"key_id": o.key}),
        "PATCH": Probe(ABSENT, lambda o: {"key_id": o.key}, lambda o: {"name": "hijacked"}),
        "DELETE": Probe(ABSENT, lambda o: {"key_id": o.key}),
    },
    "api/v1/keys/<str:key_id>/rotate": {"POST": Probe(ABSENT, lambda o: {"key_id": o.key})},
    "api/v1/deployments": {"GET": Probe(OWN), "POST": Probe(OWN, body=deployment_spec)},
    "api/v1/deployments/<str:name>": {
        "GET": Probe(ABSENT, lambda o: {"name": o.deployment}),
        "PUT": Probe(ABSENT, lambda o: {"name": o.deployment}, deployment_spec),
        "PATCH": Probe(ABSENT, lambda o: {"name": o.deployment}, lambda o: {"model": "hijacked"}),
        "DELETE": Probe(ABSENT, lambda o: {"name": o.deployment}),
    },
    "api/v1/mcp-servers": {"GET": Probe(OWN), "POST": Probe(OWN, body=mcp_spec)},
    "api/v1/mcp-servers/<str:name>": {
        "GET": Probe(ABSENT, lambda o: {"name": o.mcp_server}),
        "PUT": Probe(ABSENT, lambda o: {"name": o.mcp_server}, mcp_spec),
        "DELETE": Probe(ABSENT, lambda o: {"name": o.mcp_server}),
    },
    "api/v1/replay": {
        "GET": Probe(OWN),
        # Filtered by globex's names: still nothing.
        "GET?": Probe(OWN, query=lambda o: {"route": o.route, "user": o.user}),
    },
    "api/v1/replay/<str:record_id>": {"GET": Probe(ABSENT, lambda o: {"record_id": o.record})},
    "api/v1/replay/<str:record_id>/rerun": {
        "POST": Probe(ABSENT, lambda o: {"record_id": o.record}, lambda o: {})
    },
    "api/v1/sources/health": {
        "GET": Probe(OWN),
        "GET?": Probe(OWN, query=lambda o: {"route": o.route}),
    },
    # Globex's spend is never summed into acme's: no route, user or deployment of its is named.
    "api/v1/spend": {
        "GET": Probe(OWN),
        "GET?": Probe(OWN, query=lambda o: {"group_by": "user"}),
    },
    "api/v1/users/<str:user>/profile": {
        "GET": Probe(ABSENT, user_param),
        "PUT": Probe(OWN, user_param, lambda o: {"attributes": {"plan": "hijacked"}}),
    },
    "api/v1/users/<str:user>/memories": {
        "GET": Probe(OWN, user_param),
        "POST": Probe(OWN, user_param, lambda o: {"content": "hijacked"}),
        "DELETE": Probe(OWN, user_param),
    },
    "api/v1/users/<str:user>/memories/search": {
        # Anything similar at all, so that the owner's memory would be found if it could be.
        "POST": Probe(
            OWN, user_param, lambda o: {"query": "what does the user like?", "min_similarity": -1}
        )
    },
    "api/v1/users/<str:user>/memories/export": {"GET": Probe(OWN, user_param)},
    # A line naming the other's memory id: the id is only kept where free in the caller's own.
    "api/v1/users/<str:user>/memories/import": {
        "POST": Probe(
            OWN, user_param, lambda o: [{"id": o.memory, "user": o.user, "content": "hijacked"}]
        )
    },
    "api/v1/users/<str:user>/memories/<int:memory_id>": {
        "GET": Probe(ABSENT, memory_params),
        "PATCH": Probe(ABSENT, memory_params, lambda o: {"content": "hijacked"}),
        "DELETE": Probe(ABSENT, memory_params),
    },
    "api/v1/sessions/<str:session>/messages": {
        "GET": Probe(OWN, session_param, query=lambda o: {"user": o.user}),
        "POST": Probe(
            OWN,
            session_param,
            lambda o: {"user": o.user, "messages": [{"role": "user", "content": "hijacked"}]},
        ),
    },
    "api/v1/sessions/<str:session>/prewarm": {
        "POST": Probe(ABSENT, session_param, lambda o: {"route": o.route, "user": o.user})
    },
    "api/v1/collections": {
        "GET": Probe(OWN),
        "POST": Probe(OWN, body=lambda o: {"name": o.collection}),
    },
    "api/v1/collections/<str:name>/documents": {
        "GET": Probe(ABSENT, collection_param),
        "POST": Probe(ABSENT, collection_param, lambda o: DOCUMENTS),
    },
    "api/v1/collections/<str:name>/documents/<str:document_id>": {
        "GET": Probe(ABSENT, document_params),
        "DELETE": Probe(ABSENT, document_params),
    },
    "api/v1/jobs/<str:job_id>": {"GET": Probe(ABSENT, lambda o: {"job_id": o.job})},
    "v1/chat/completions": {
        "POST": Probe(ABSENT, body=lambda o: {"model": o.route, **chat("hi")}),
        # With globex's user named too.
        "POST?": Probe(
            ABSENT,
            body=lambda o: {"model": o.route, "user": o.user, **chat("hi")},
        ),
    },
    "v1/messages": {
        "POST": Probe(ABSENT, body=lambda o: {"model": o.route, "max_tokens": 16, **chat("hi")})
    },
    "v1/messages/count_tokens": {
        "POST": Probe(ABSENT, body=lambda o: {"model": o.route, **chat("hi")}),
    },
    "v1/models": {"GET": Probe(OWN)},
    "v1/responses": {
        "POST": Probe(ABSENT, body=lambda o: {"model": o.route, "input": "hi"}),
        # Continuing the other's stored response.
        "POST?": Probe(
            ABSENT,
            body=lambda o: {
                "model": o.route,
                "user": o.user,
                "input": "hi",
                "previous_response_id": o.response,
            },
        ),
    },
    "v1/responses/<str:response_id>": {
        "GET": Probe(
            ABSENT, lambda o: {"response_id": o.response}, query=lambda o: {"user": o.user}
        ),
        # Deleting the other's stored response: 404, and nothing of theirs changes.
        "DELETE": Probe(
            ABSENT, lambda o: {"response_id": o.response}, query=lambda o: {"user": o.user}
        ),
    },
    "v1/models/<str:model>": {"GET": Probe(ABSENT, lambda o: {"model": o.route})},
}

# A key ending in "?" is a second probe of the same method (other parameters).
SERVED = {
    (pattern, method)
    for pattern, methods in WALKED.items()
    for method in methods
    if EXPECTED.get(pattern, {}).get(method) != PUBLIC
}
CASES = sorted((pattern, key) for pattern, row in PROBES.items() for key in row)


def method_of(key: str) -> str:
    return key.rstrip("?")


def test_every_endpoint_has_a_probe() -> None:
    probed = {(pattern, method_of(key)) for pattern, key in CASES}
    missing = sorted(f"{method} {pattern}" for pattern, method in SERVED - probed)
    assert not missing, f"endpoints without a cross-tenant probe (add them to PROBES): {missing}"
    stale = sorted(f"{method} {pattern}" for pattern, method in probed - SERVED)
    assert not stale, f"PROBES names endpoints or methods nobody serves: {stale}"


def concrete(pattern: str, params: dict[str, Any]) -> str:
    path = "/" + pattern
    for name, value in params.items():
        converter = "int" if isinstance(value, int) else "str"
        path = path.replace(f"<{converter}:{name}>", str(value))
    assert "<" not in path, f"{pattern}: a path parameter without a value ({params})"
    return path


@contextmanager
def rolled_back() -> Iterator[None]:
    with transaction.atomic():
        try:
            yield
        finally:
            transaction.set_rollback(True)
    config_cache.clear_all()  # nor may what the call made be kept for the next one


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any
    query: dict[str, str]

    def send(self, api: ApiClient) -> Any:
        if self.method == "GET":
            return api.get(self.path, self.query)
        path = f"{self.path}?{urlencode(self.query)}" if self.query else self.path
        return api.send(self.method, path, self.body)

    def __str__(self) -> str:
        query = f"?{urlencode(self.query)}" if self.query else ""
        body = f" {json.dumps(self.body)}" if self.body is not None else ""
        return f"{self.method} {self.path}{query}{body}"


def call_of(pattern: str, key: str, probe: Probe, owned: Owned) -> Call:
    return Call(
        method=method_of(key),
        path=concrete(pattern, probe.params(owned)),
        body=probe.body(owned) if probe.body else None,
        query=probe.query(owned),
    )


def judged(call: Call, probe: Probe, response: Any, secret: str, names: list[str]) -> list[str]:
    """What is wrong with ``response`` to a probe of someone else's resources."""
    raw = b"".join(response.streaming_content) if response.streaming else response.content
    text = raw.decode(errors="replace")
    wrong = []
    if response.status_code >= 500:
        wrong.append(f"{call}: {response.status_code} {text[:300]}")
    elif probe.expect == ABSENT and response.status_code != 404:
        wrong.append(f"{call}: {response.status_code}, expected 404: {text[:300]}")
    asked = json.dumps([call.path, call.body, call.query])  # an answer may repeat the question
    if secret in text and secret not in asked:
        wrong.append(f"{call}: the answer shows the owner's content: {text[:300]}")
    shown = [name for name in names if name in text and name not in asked]
    if shown:
        wrong.append(f"{call}: the answer names the owner's {shown}: {text[:300]}")
    return wrong


def changed_tables(before: Snapshot, after: Snapshot) -> list[str]:
    return sorted(
        table for table in before.keys() | after.keys() if before.get(table) != after.get(table)
    )


def test_acme_reaches_nothing_of_globex(
    acme_api: ApiClient, globex_api: ApiClient, globex: TenantFixture
) -> None:
    owned = own_everything(globex_api, globex.schema, "u_globex", SECRET, "globex")
    before = snapshot(globex.schema)
    failures: list[str] = []
    for pattern, key in CASES:
        probe = PROBES[pattern][key]
        call = call_of(pattern, key, probe, owned)
        with rolled_back():
            failures += judged(call, probe, call.send(acme_api), SECRET, owned.names())
            if changed := changed_tables(before, snapshot(globex.schema)):
                failures.append(f"{call}: changed globex's {changed}")
    assert not failures, "\n".join(failures)


# Within a tenant: ann's ids with bob named. The probes above, but for the calls where the route
# itself is acme's own (resolve, pre-warm), which succeed on bob's (empty) session.
USER_SCOPED: list[tuple[str, str, str]] = [
    ("api/v1/users/<str:user>/profile", "GET", ABSENT),
    ("api/v1/users/<str:user>/profile", "PUT", OWN),
    ("api/v1/users/<str:user>/memories", "GET", OWN),
    ("api/v1/users/<str:user>/memories", "POST", OWN),
    ("api/v1/users/<str:user>/memories", "DELETE", OWN),
    ("api/v1/users/<str:user>/memories/search", "POST", OWN),
    ("api/v1/users/<str:user>/memories/export", "GET", OWN),
    ("api/v1/users/<str:user>/memories/import", "POST", OWN),
    ("api/v1/users/<str:user>/memories/<int:memory_id>", "GET", ABSENT),
    ("api/v1/users/<str:user>/memories/<int:memory_id>", "PATCH", ABSENT),
    ("api/v1/users/<str:user>/memories/<int:memory_id>", "DELETE", ABSENT),
    ("api/v1/sessions/<str:session>/messages", "GET", OWN),
    ("api/v1/sessions/<str:session>/messages", "POST", OWN),
    ("api/v1/sessions/<str:session>/prewarm", "POST", OWN),
    ("api/v1/resolve", "POST", OWN),
    ("api/v1/storage/context-recovery/retrieve", "POST", ABSENT),
    ("api/v1/storage/context-recovery/invalidate", "POST", OWN),
    ("v1/responses", "POST?", ABSENT),
    ("v1/responses/<str:response_id>", "GET", ABSENT),
    ("v1/responses/<str:response_id>", "DELETE", ABSENT),
]


def anns_rows(schema: str, user: str) -> Snapshot:
    """Every row of ``schema`` that names ann: her profile, memories, messages, blobs, records."""
    return {table: [row for row in rows if user in row] for table, rows in snapshot(schema).items()}


def test_bob_named_reaches_nothing_of_anns(acme_api: ApiClient, acme: TenantFixture) -> None:
    ann = own_everything(acme_api, acme.schema, "u_ann", ANN_SECRET, "ann", route_text="acme rule")
    as_bob = replace(ann, user="u_bob")
    before = anns_rows(acme.schema, ann.user)
    failures: list[str] = []
    for pattern, key, expect in USER_SCOPED:
        probe = replace(PROBES[pattern][key], expect=expect)
        call = call_of(pattern, key, probe, as_bob)
        with rolled_back():
            failures += judged(call, probe, call.send(acme_api), ANN_SECRET, [])
            if changed := changed_tables(before, anns_rows(acme.schema, ann.user)):
                failures.append(f"{call}: changed ann's rows in {changed}")
    assert not failures, "\n".join(failures)
