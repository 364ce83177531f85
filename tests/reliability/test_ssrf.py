"""The SSRF target list (``tests/ssrf_targets.py``) through every outbound path a tenant can point
at a URL: the ``external_api`` RAG backend, ``realtime_apis`` connectors, MCP servers (the ``mcp``
RAG backend), a deployment the gateway forwards to, the OpenAI file-search backend's base URL and
the Milvus and Qdrant server URLs. (The remote embedder is the platform's setting, not a tenant's.)

Each internal target, aimed at the port of a loopback service of the test's, must be refused with
the guard's error (or, for a name this machine does not resolve, as unresolvable; or already when
the configuration is written, as a 400) and the service must receive nothing. A redirect from an
allowed loopback service to an internal address is refused too (or not followed, where a path
follows none). The positive case of each path: the tenant's allow-list names the loopback service,
and the path reaches it.

Everything runs in process on the test's transaction, through the API with acme's key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.fake_models import chat_completion
from tests.loopback import (
    LOOPBACK,
    Reply,
    Seen,
    Service,
    json_reply,
    outbound_allowlist,
    running_service,
)
from tests.sources.mcp.server import RunningMcpServer, running_mcp_server
from tests.ssrf_targets import INTERNAL, Target

QUESTION = "where is my refund?"
# What the guard says when it refuses a destination, or the URL parser under the client when it
# cannot even read one (an IPv4 address in octal parts: nothing is sent).
REFUSALS = (
    "refused",
    "cannot resolve",
    "does not resolve",
    "not a valid url",
    "invalid ipv4 address",
)


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str
    status: int  # of the call that reached out (or of the write that refused the URL)


# --- the paths -----------------------------------------------------------------------------------


def rag_route(backend: str, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "ssrf",
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "out",
                    "backend": backend,
                    "backend_config": config,
                    "timeout_ms": 5000,
                    "match": {"recall": {"top_k": 5, "min_similarity": -1}},
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def realtime_route(url: str) -> dict[str, Any]:
    return {
        "name": "ssrf",
        "context": {
            "sources": [
                {
                    "type": "realtime_apis",
                    "name": "out",
                    "timeout_ms": 5000,
                    "connectors": [{"name": "live", "url": url, "select": "$.items[*]"}],
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def written(response: Any) -> Outcome | None:
    """None when the configuration was saved; else the write's refusal (a 400, never a 5xx)."""
    if response.status_code in (200, 201):
        return None
    assert response.status_code == 400, response.content
    return Outcome(ok=False, error=response.json()["error"]["message"], status=400)


def through_resolve(api: ApiClient, route: dict[str, Any]) -> Outcome:
    refused = written(api.post("/api/v1/routes", route))
    if refused is not None:
        return refused
    response = api.post(
        "/api/v1/resolve",
        {
            "route": "ssrf",
            "user": "u_1",
            "request": {"messages": [{"role": "user", "content": QUESTION}]},
        },
    )
    assert response.status_code in (200, 503), response.content
    if response.status_code == 503:
        return Outcome(ok=False, error=response.json()["error"]["message"], status=503)
    source = next(s for s in response.json()["sources"] if s["name"] == "out")
    error = source.get("error") or ""
    notes = source.get("notes") or {}
    error += json.dumps(notes.get("connectors", {}))
    return Outcome(ok=source["status"] == "ok", error=error, status=200)


def external_api(api: ApiClient, url: str) -> Outcome:
    mapping = {"documents_path": "hits", "text_path": "text", "id_path": "id", "score": "pinecone"}
    config = {"endpoint": url + "search", "response": mapping}
    return through_resolve(api, rag_route("external_api", config))


def realtime(api: ApiClient, url: str) -> Outcome:
    return through_resolve(api, realtime_route(url + "live"))


def mcp(api: ApiClient, url: str) -> Outcome:
    refused = written(api.post("/api/v1/mcp-servers", {"name": "out", "url": url + "mcp"}))
    if refused is not None:
        return refused
    return through_resolve(api, rag_route("mcp", {"server_name": "out", "tool_name": "search"}))


def openai_search(api: ApiClient, url: str) -> Outcome:
    config = {
        "vector_store_id": "vs_abc123",
        "api_key": "sk-proj-ssrf-0123456789",
        "base_url": url + "v1",
    }
    return through_resolve(api, rag_route("openai", config))


def milvus(api: ApiClient, url: str) -> Outcome:
    return through_resolve(api, rag_route("milvus", {"collection": "docs", "uri": url.rstrip("/")}))


def qdrant(api: ApiClient, url: str) -> Outcome:
    return through_resolve(api, rag_route("qdrant", {"collection": "docs", "url": url.rstrip("/")}))


def gateway(api: ApiClient, url: str) -> Outcome:
    deployment = {
        "name": "out",
        "protocol": "openai",
        "base_url": url + "v1",
        "model": "m",
        "api_key": "sk-ssrf",
    }
    refused = written(api.post("/api/v1/deployments", deployment))
    if refused is not None:
        return refused
    route = {"name": "ssrf", "model": {"upstream": "out"}, "context": {"sources": []}}
    assert api.post("/api/v1/routes", route).status_code == 201
    response = api.post(
        "/v1/chat/completions",
        {"model": "ssrf", "messages": [{"role": "user", "content": QUESTION}]},
    )
    assert response.status_code < 500 or response.status_code in (502, 504), response.content
    body = response.json()
    error = body["error"]["message"] if "error" in body else ""
    return Outcome(ok=response.status_code == 200, error=error, status=response.status_code)


@dataclass(frozen=True)
class Path:
    reach: Callable[[ApiClient, str], Outcome]
    follows_redirects: bool = True
    engine: bool = False  # its own client connects (gRPC, HTTP): the guard checks the address first


PATHS: dict[str, Path] = {
    "external_api": Path(external_api),
    "realtime_apis": Path(realtime),
    "mcp": Path(mcp, follows_redirects=False),
    "gateway_deployment": Path(gateway, follows_redirects=False),
    "openai_file_search": Path(openai_search),
    "milvus": Path(milvus, follows_redirects=False, engine=True),
    "qdrant": Path(qdrant, follows_redirects=False, engine=True),
}


# --- what the loopback service answers -----------------------------------------------------------


def answer(seen: Seen) -> Reply:
    """Each path's answer, by the path it asks for."""
    path = seen.path.split("?", 1)[0]
    if path.endswith("/search") and "/vector_stores/" in path:
        return json_reply(
            {
                "object": "vector_store.search_results.page",
                "search_query": [QUESTION],
                "data": [
                    {
                        "file_id": "f1",
                        "filename": "refunds.md",
                        "score": 0.9,
                        "attributes": {},
                        "content": [{"type": "text", "text": "Refunds take 5 days."}],
                    }
                ],
                "has_more": False,
                "next_page": None,
            }
        )
    if path.endswith("/search"):
        return json_reply(
            {"hits": [{"id": "refund", "text": "Refunds take 5 days.", "score": 0.9}]}
        )
    if path.endswith("/live"):
        return json_reply({"items": [{"balance": 3}]})
    if path.endswith("/chat/completions"):
        return json_reply(chat_completion("refunds take 5 days"))
    return json_reply({}, status=404)


@pytest.fixture
def service() -> Iterator[Service]:
    with running_service() as running:
        running.responder = answer
        yield running


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[RunningMcpServer]:
    with running_mcp_server() as running:
        yield running


def refused_as_the_guard_says(outcome: Outcome) -> bool:
    error = outcome.error.lower()
    return not outcome.ok and any(word in error for word in REFUSALS)


@pytest.mark.parametrize("target", INTERNAL, ids=lambda t: t.host)
@pytest.mark.parametrize("path", list(PATHS))
def test_every_internal_address_is_refused(
    acme_api: ApiClient, service: Service, path: str, target: Target
) -> None:
    outcome = PATHS[path].reach(acme_api, target.url(service.port))
    assert refused_as_the_guard_says(outcome), (path, target, outcome)
    assert service.hits == 0, (path, target, service.paths)


REDIRECTS = [
    "http://10.0.0.1/steal",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/",
    "http://127.0.0.2/",
    "http://[::ffff:10.0.0.1]/",
]  # (localhost and 0x7f000001 are 127.0.0.1, which the allow-list names: they may be followed)


@pytest.mark.parametrize("location", REDIRECTS)
@pytest.mark.parametrize("path", [name for name, p in PATHS.items() if not p.engine])
def test_a_redirect_from_an_allowed_service_to_an_internal_address_is_refused(
    acme: TenantFixture, acme_api: ApiClient, service: Service, path: str, location: str
) -> None:
    # The allow-list names the loopback service's address; the redirect leaves it.
    service.responder = lambda seen: Reply(302, b"", {"Location": location})
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        outcome = PATHS[path].reach(acme_api, f"http://{LOOPBACK}:{service.port}/")
    assert not outcome.ok, (path, location, outcome)
    if PATHS[path].follows_redirects:
        assert refused_as_the_guard_says(outcome), (path, location, outcome)
        assert service.hits == 1, (path, location, service.paths)  # the first hop only
    else:  # the MCP client asks again in another protocol version; neither follows
        assert service.hits >= 1 and all(p == "/mcp" for p in service.paths if path == "mcp")


@pytest.mark.parametrize("path", list(PATHS))
def test_the_allow_list_opens_each_path_to_what_it_names(
    acme: TenantFixture,
    acme_api: ApiClient,
    service: Service,
    mcp_server: RunningMcpServer,
    path: str,
) -> None:
    base = f"http://{LOOPBACK}:{(mcp_server.port if path == 'mcp' else service.port)}/"
    with outbound_allowlist(acme.schema, [LOOPBACK]):
        outcome = PATHS[path].reach(acme_api, base)
    if PATHS[path].engine:
        # No engine listens there: the engine's client fails to talk to the service, which is
        # past the guard (no refusal).
        assert not outcome.ok
        assert not any(word in outcome.error.lower() for word in ("refused:", "allow-list")), (
            outcome
        )
        return
    assert outcome.ok, (path, outcome)
    if path != "mcp":
        assert service.hits >= 1
