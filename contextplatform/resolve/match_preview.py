"""Retrieval preview: what each RAG and memory source of a route recalls and keeps for a query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextplatform.resolve import modes
from contextplatform.resolve.pipeline import ResolveRequest, resolve


def preview_route(
    *,
    tenant_schema: str,
    route_name: str,
    query: str,
    user: str | None,
    allowlist: Sequence[str] = (),
) -> dict[str, Any]:
    """The route's previewable sources fetched for ``query`` (the pipeline's ``match_preview``
    mode: recall and judge, no cache, nothing reinforced or recorded)."""
    run = resolve(
        ResolveRequest(
            tenant_schema=tenant_schema,
            route=route_name,
            user=user,
            query=query,
            allowlist=tuple(allowlist),
        ),
        modes.MATCH_PREVIEW,
    )
    assert run.request is not None
    return {
        "route": run.request.route,
        "query": query,
        "sources": [
            {
                "name": outcome.name,
                "type": outcome.type,
                "status": outcome.status,
                "error": outcome.error,
                "ms": round(outcome.ms, 2),
                "notes": outcome.notes,
                # A deployment judge's calls, tokens and cost (None: no deployment judged).
                "judge_usage": outcome.notes.get("judge_usage"),
                "items": outcome.candidates,  # scores and decisions; never the text
            }
            for outcome in run.outcomes
        ],
    }
