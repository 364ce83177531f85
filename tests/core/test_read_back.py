"""Every resource reads back the way it is written (docs/api.md, "Routes"): its GET body posts to
another tenant (or another user, or back to itself) as it is, read-only fields ignored, and the
result reads the same. Secrets stay write-only: a GET body carries none, so posted elsewhere it has
none, and written back it keeps the stored one."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import ApiClient

# What the platform derives or stamps: it differs between two copies of the same resource.
STAMPS = {"created_at", "updated_at", "last_used_at", "id", "user", "version"}


def same(a: dict[str, Any], b: dict[str, Any], *, besides: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    skipped = STAMPS | besides
    assert {k: v for k, v in a.items() if k not in skipped} == {
        k: v for k, v in b.items() if k not in skipped
    }


def without_secret(route: dict[str, Any]) -> dict[str, Any]:
    """The route less the qdrant source's key, which only the tenant that wrote it holds."""
    route = copy.deepcopy(route)
    for part in ("context", "effective_context"):
        next(s for s in route[part]["sources"] if s["name"] == "vectors")["backend_config"].pop(
            "api_key", None
        )
    return route


def created(api: ApiClient, path: str, body: dict[str, Any], status: int = 201) -> Any:
    response = api.post(path, body)
    assert response.status_code == status, response.content
    return response.json()


def test_every_resource_reads_back_as_written(acme_api: ApiClient, globex_api: ApiClient) -> None:
    # Deployments: the key and the header values are write-only.
    created(
        acme_api,
        "/api/v1/deployments",
        {
            "name": "gpt",
            "protocol": "openai",
            "base_url": "https://api.openai.com/v1",
            "model": "gpt-4o-mini",
            "api_key": "sk-read-back-0123456789",
            "headers": {"OpenAI-Organization": "org-1"},
        },
    )
    deployment = acme_api.get("/api/v1/deployments/gpt").json()
    assert deployment["api_key_set"] is True
    assert deployment["headers_set"] == ["OpenAI-Organization"]
    copied = created(globex_api, "/api/v1/deployments", deployment)
    same(copied, deployment, besides={"api_key_set", "headers_set"})
    assert copied["api_key_set"] is False  # the key it could not see is not invented
    assert copied["headers_set"] == []  # nor the headers
    put = acme_api.put("/api/v1/deployments/gpt", deployment)
    assert put.status_code == 200, put.content
    same(put.json(), deployment)
    assert put.json()["api_key_set"] is True  # written back without the key: the key stays
    patched = acme_api.patch("/api/v1/deployments/gpt", deployment)
    assert patched.status_code == 200, patched.content
    same(patched.json(), deployment)

    # MCP servers: header values are write-only.
    created(
        acme_api,
        "/api/v1/mcp-servers",
        {
            "name": "crm",
            "url": "https://crm.example.com/mcp",
            "headers": {"Authorization": "Bearer crm-secret"},
            "timeout_ms": 4000,
        },
    )
    server = acme_api.get("/api/v1/mcp-servers/crm").json()
    assert server["headers_set"] == ["Authorization"]
    copied = created(globex_api, "/api/v1/mcp-servers", server)
    same(copied, server, besides={"headers_set"})
    assert copied["headers_set"] == []
    put = acme_api.put("/api/v1/mcp-servers/crm", server)
    assert put.status_code == 200, put.content
    same(put.json(), server)

    # Collections (a new one counts 0 documents and 0 chunks) and their documents.
    made = created(acme_api, "/api/v1/collections", {"name": "kb", "description": "Help"})
    assert (made["documents"], made["chunks"]) == (0, 0)
    ingest = {
        "documents": [
            {
                "id": "refund",
                "title": "Refunds",
                "text": "Refunds take 5 days.",
                "metadata": {"a": 1},
            }
        ]
    }
    created(acme_api, "/api/v1/collections/kb/documents", ingest, status=202)
    (listed,) = acme_api.get("/api/v1/collections").json()["data"]
    assert (listed["documents"], listed["chunks"]) != (0, 0)
    copied = created(globex_api, "/api/v1/collections", listed)
    same(copied, made, besides={"embedder"})
    document = acme_api.get("/api/v1/collections/kb/documents/refund").json()
    assert document["text"] == "Refunds take 5 days."
    created(globex_api, "/api/v1/collections/kb/documents", {"documents": [document]}, status=202)
    same(globex_api.get("/api/v1/collections/kb/documents/refund").json(), document)

    # Routes: ``context`` is what the route writes, ``effective_context`` the layered result; a
    # source's secret is write-only.
    route = {
        "name": "support",
        "description": "Support answers",
        "model": {"context_window": 32000, "max_output_tokens": 1024, "upstream": "gpt"},
        "context": {
            "sources": [
                {"type": "rag", "name": "docs", "backend_config": {"collection": "kb"}},
                {
                    "type": "rag",
                    "name": "vectors",
                    "backend": "qdrant",
                    "backend_config": {
                        "collection": "kb",
                        "url": "https://qdrant.example.com",
                        "api_key": "qdrant-secret",
                    },
                },
            ],
            "budget": {"context_tokens": 900},
        },
    }
    created(acme_api, "/api/v1/routes", route)
    read = acme_api.get("/api/v1/routes/support").json()
    assert "own_context" not in read
    assert read["context"]["budget"] == {"context_tokens": 900}
    assert read["effective_context"]["budget"]["context_tokens"] == 900
    assert read["context"]["sources"][1]["backend_config"]["api_key"] == {"set": True}
    copied = created(globex_api, "/api/v1/routes", read)
    same(without_secret(copied), without_secret(read))
    copy_vectors = copied["context"]["sources"][1]
    assert "api_key" not in copy_vectors["backend_config"]  # no secret it could not see
    renamed = created(acme_api, "/api/v1/routes", {**read, "name": "support-2"})
    # A new route has no stored secret for {"set": true} to keep: it writes the key again.
    same(without_secret(renamed), without_secret(read), besides={"name"})
    put = acme_api.put("/api/v1/routes/support", read)
    assert put.status_code == 200, put.content
    same(put.json(), read)
    patched = acme_api.patch("/api/v1/routes/support", read)
    assert patched.status_code == 200, patched.content
    same(patched.json(), read)

    # Memories: to another user, to another tenant, and back to itself.
    memory = created(
        acme_api,
        "/api/v1/users/u_1/memories",
        {
            "content": "Prefers email over phone.",
            "kind": "preference",
            "metadata": {"channel": "email"},
            "observed_at": "2026-11-30T09:00:00+00:00",
        },
    )
    read = acme_api.get(f"/api/v1/users/u_1/memories/{memory['id']}").json()
    other_user = created(acme_api, "/api/v1/users/u_2/memories", read)
    same(other_user, read, besides={"strength", "source_request_id", "source_turn"})
    assert other_user["user"] == "u_2"
    other_tenant = created(globex_api, "/api/v1/users/u_1/memories", read)
    same(other_tenant, read, besides={"strength", "source_request_id", "source_turn"})
    patched = acme_api.patch(f"/api/v1/users/u_1/memories/{memory['id']}", read)
    assert patched.status_code == 200, patched.content
    same(patched.json(), read, besides={"strength"})

    # Profiles.
    assert (
        acme_api.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "pro"}}).status_code
        == 200
    )
    profile = acme_api.get("/api/v1/users/u_1/profile").json()
    put = globex_api.put("/api/v1/users/u_9/profile", profile)
    assert put.status_code == 200, put.content
    same(put.json(), profile)


def test_a_misspelt_field_is_still_refused(acme_api: ApiClient) -> None:
    """Only the representation's own read-only fields are ignored; anything else is unknown."""
    response = acme_api.post("/api/v1/routes", {"name": "r", "contxt": {}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "contxt"
    response = acme_api.post("/api/v1/collections", {"name": "kb", "document": 3})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "document"
