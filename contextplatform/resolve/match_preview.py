"""Retrieval preview: what each RAG and memory source of a route recalls and keeps for a query."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from contextplatform.resolve.resolver import build_sources
from contextplatform.routes.selectors import existing_route
from sources.base import ContextRequest
from sources.fetch import fetch_all_from_thread


def preview_route(
    *,
    tenant_schema: str,
    route_name: str,
    query: str,
    user: str | None,
    allowlist: Sequence[str] = (),
) -> dict[str, Any]:
    route = existing_route(route_name)
    spec = route.spec()
    sources = [source for source in build_sources(spec) if source.previewable]
    request = ContextRequest(
        request_id="pvw_" + secrets.token_hex(8),
        tenant=tenant_schema,
        route=route.name,
        user=user,
        session=None,
        query=query,
        allowlist=tuple(allowlist),
        use_cache=False,
        dry_run=True,
        judge_deployment=spec.model.upstream,  # the same default judge as the route's resolves
    )
    outcomes = fetch_all_from_thread(sources, request)
    return {
        "route": route.name,
        "query": query,
        "sources": [
            {
                "name": outcome.name,
                "type": outcome.type,
                "status": outcome.status,
                "error": outcome.error,
                "ms": round(outcome.ms, 2),
                "notes": outcome.notes,
                "items": outcome.candidates,  # scores and decisions; never the text
            }
            for outcome in outcomes
        ],
    }
