"""Every operation's public name in the OpenAPI schema: its tag (the area Swagger UI groups it
under) and its operation id (the method name an SDK generator gives it), in one table, so the
names follow one rule (docs/architecture.md, "The API's schema"):

- an id is lowerCamelCase: a verb then what it acts on, e.g. ``listRoutes``, ``getRoute``;
- ``list`` a collection, ``get`` one item, ``create`` a new one, ``replace`` for PUT, ``update``
  for PATCH, ``delete``; any other action is its own verb (``resolveContext``, ``exportRoute``).

``name_operations`` is a drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS``): it adds
the gateway's operations (its views are not DRF's: ``contextplatform/gateway/openapi.py``), then
names every operation from the table. An endpoint missing from the table keeps drf-spectacular's
generated name and tag, which ``tests/test_openapi_operations.py`` refuses.
"""

from __future__ import annotations

import copy
from typing import Any

from contextplatform.gateway.openapi import GATEWAY_PATHS

# The tags, in the order Swagger UI shows them, with what each groups.
TAGS: dict[str, str] = {
    "Gateway": "OpenAI- and Anthropic-compatible endpoints: the route's context, then its model",
    "Resolve": "Resolve a route's context for a request; hand the answer back; pre-warm",
    "Replay": "What each resolve did: sources, items, scores and decisions",
    "Health": "Each source's health per route: the last hour against the week before, alerts",
    "Routes": "The operators' routes: what each request gets to see",
    "Evaluations": "Each route's evaluation cases, run after every save and on demand",
    "Deployments": "The tenant's upstream models",
    "Keys": "The tenant's own API keys: scopes, expiry, rate limits and budgets",
    "MCP servers": "The tenant's MCP servers, sources of tools and resources",
    "Knowledge": "Collections, their documents and ingestion jobs",
    "Memory": "Each user's memories",
    "Users & sessions": "User profiles and session messages",
    "Compression": "The compression plugin: capabilities, health, preview, stats, recovery",
}

# (method, path) → (tag, operation id).
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("POST", "/v1/chat/completions"): ("Gateway", "createChatCompletion"),
    ("POST", "/v1/messages"): ("Gateway", "createMessage"),
    ("POST", "/v1/messages/count_tokens"): ("Gateway", "countMessageTokens"),
    ("GET", "/v1/models"): ("Gateway", "listModels"),
    ("GET", "/v1/models/{model}"): ("Gateway", "getModel"),
    ("POST", "/v1/responses"): ("Gateway", "createResponse"),
    ("GET", "/v1/responses/{response_id}"): ("Gateway", "getResponse"),
    ("DELETE", "/v1/responses/{response_id}"): ("Gateway", "deleteResponse"),
    ("POST", "/api/v1/resolve"): ("Resolve", "resolveContext"),
    ("POST", "/api/v1/resolve/{resolve_id}/response"): ("Resolve", "recordResolveResponse"),
    ("POST", "/api/v1/resolve/{resolve_id}/feedback"): ("Resolve", "sendFeedback"),
    ("POST", "/api/v1/plugins/context/preview"): ("Resolve", "previewContext"),
    ("POST", "/api/v1/sessions/{session}/prewarm"): ("Resolve", "prewarmSession"),
    ("GET", "/api/v1/replay"): ("Replay", "listReplayRecords"),
    ("GET", "/api/v1/replay/{record_id}"): ("Replay", "getReplayRecord"),
    ("POST", "/api/v1/replay/{record_id}/rerun"): ("Replay", "rerunReplayRecord"),
    ("GET", "/api/v1/sources/health"): ("Health", "getSourceHealth"),
    ("GET", "/api/v1/spend"): ("Replay", "getSpend"),
    ("GET", "/api/v1/routes"): ("Routes", "listRoutes"),
    ("POST", "/api/v1/routes"): ("Routes", "createRoute"),
    ("GET", "/api/v1/routes/{name}"): ("Routes", "getRoute"),
    ("PUT", "/api/v1/routes/{name}"): ("Routes", "replaceRoute"),
    ("PATCH", "/api/v1/routes/{name}"): ("Routes", "updateRoute"),
    ("DELETE", "/api/v1/routes/{name}"): ("Routes", "deleteRoute"),
    ("GET", "/api/v1/routes/{name}/export"): ("Routes", "exportRoute"),
    ("POST", "/api/v1/routes/import"): ("Routes", "importRoutes"),
    ("GET", "/api/v1/routes/{name}/evals"): ("Evaluations", "getRouteEvals"),
    ("PUT", "/api/v1/routes/{name}/evals"): ("Evaluations", "replaceRouteEvals"),
    ("POST", "/api/v1/routes/{name}/evals/run"): ("Evaluations", "runRouteEvals"),
    ("GET", "/api/v1/eval-runs/{run}"): ("Evaluations", "getEvalRun"),
    ("GET", "/api/v1/keys"): ("Keys", "listKeys"),
    ("POST", "/api/v1/keys"): ("Keys", "createKey"),
    ("GET", "/api/v1/keys/{key_id}"): ("Keys", "getKey"),
    ("PATCH", "/api/v1/keys/{key_id}"): ("Keys", "updateKey"),
    ("DELETE", "/api/v1/keys/{key_id}"): ("Keys", "revokeKey"),
    ("POST", "/api/v1/keys/{key_id}/rotate"): ("Keys", "rotateKey"),
    ("GET", "/api/v1/deployments"): ("Deployments", "listDeployments"),
    ("POST", "/api/v1/deployments"): ("Deployments", "createDeployment"),
    ("GET", "/api/v1/deployments/{name}"): ("Deployments", "getDeployment"),
    ("PUT", "/api/v1/deployments/{name}"): ("Deployments", "replaceDeployment"),
    ("PATCH", "/api/v1/deployments/{name}"): ("Deployments", "updateDeployment"),
    ("DELETE", "/api/v1/deployments/{name}"): ("Deployments", "deleteDeployment"),
    ("GET", "/api/v1/mcp-servers"): ("MCP servers", "listMcpServers"),
    ("POST", "/api/v1/mcp-servers"): ("MCP servers", "createMcpServer"),
    ("GET", "/api/v1/mcp-servers/{name}"): ("MCP servers", "getMcpServer"),
    ("PUT", "/api/v1/mcp-servers/{name}"): ("MCP servers", "replaceMcpServer"),
    ("DELETE", "/api/v1/mcp-servers/{name}"): ("MCP servers", "deleteMcpServer"),
    ("GET", "/api/v1/collections"): ("Knowledge", "listCollections"),
    ("POST", "/api/v1/collections"): ("Knowledge", "createCollection"),
    ("GET", "/api/v1/collections/{name}/documents"): ("Knowledge", "listDocuments"),
    ("POST", "/api/v1/collections/{name}/documents"): ("Knowledge", "addDocuments"),
    ("GET", "/api/v1/collections/{name}/documents/{document_id}"): ("Knowledge", "getDocument"),
    ("DELETE", "/api/v1/collections/{name}/documents/{document_id}"): (
        "Knowledge",
        "deleteDocument",
    ),
    ("GET", "/api/v1/jobs/{job_id}"): ("Knowledge", "getJob"),
    ("GET", "/api/v1/users/{user}/memories"): ("Memory", "listMemories"),
    ("POST", "/api/v1/users/{user}/memories"): ("Memory", "createMemory"),
    ("DELETE", "/api/v1/users/{user}/memories"): ("Memory", "eraseMemories"),
    ("GET", "/api/v1/users/{user}/memories/{memory_id}"): ("Memory", "getMemory"),
    ("PATCH", "/api/v1/users/{user}/memories/{memory_id}"): ("Memory", "updateMemory"),
    ("DELETE", "/api/v1/users/{user}/memories/{memory_id}"): ("Memory", "deleteMemory"),
    ("GET", "/api/v1/users/{user}/memories/export"): ("Memory", "exportMemories"),
    ("POST", "/api/v1/users/{user}/memories/import"): ("Memory", "importMemories"),
    ("POST", "/api/v1/users/{user}/memories/search"): ("Memory", "searchMemories"),
    ("GET", "/api/v1/users/{user}/profile"): ("Users & sessions", "getUserProfile"),
    ("PUT", "/api/v1/users/{user}/profile"): ("Users & sessions", "replaceUserProfile"),
    ("GET", "/api/v1/sessions/{session}/messages"): ("Users & sessions", "listSessionMessages"),
    ("POST", "/api/v1/sessions/{session}/messages"): ("Users & sessions", "addSessionMessages"),
    ("GET", "/api/v1/plugins/context/compression/capabilities"): (
        "Compression",
        "getCompressionCapabilities",
    ),
    ("GET", "/api/v1/plugins/context/compression/health"): (
        "Compression",
        "getCompressionHealth",
    ),
    ("POST", "/api/v1/plugins/context/compression/preview"): (
        "Compression",
        "previewCompression",
    ),
    ("GET", "/api/v1/observability/plugins/context/compression/stats"): (
        "Compression",
        "getCompressionStats",
    ),
    ("POST", "/api/v1/storage/context-recovery/retrieve"): (
        "Compression",
        "retrieveRecoveredContent",
    ),
    ("POST", "/api/v1/storage/context-recovery/invalidate"): (
        "Compression",
        "invalidateRecoveredContent",
    ),
}

METHODS = ("get", "put", "post", "delete", "patch")
API_KEY_SECURITY = [{"ApiKeyBearer": []}, {"ApiKeyHeader": []}]


def name_operations(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Add the gateway's operations, then tag and name every operation from the table."""
    paths = result.setdefault("paths", {})
    for path, operations in GATEWAY_PATHS.items():
        for method, operation in operations.items():
            paths.setdefault(path, {})[method] = {
                **copy.deepcopy(operation),
                "security": API_KEY_SECURITY,
            }
    for path, operations in paths.items():
        for method, operation in operations.items():
            named = OPERATIONS.get((method.upper(), path)) if method in METHODS else None
            if named is not None:
                operation["tags"] = [named[0]]
                operation["operationId"] = named[1]
    result["tags"] = [{"name": name, "description": text} for name, text in TAGS.items()]
    return result
