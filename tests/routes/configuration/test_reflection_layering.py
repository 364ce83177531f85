"""A memory source's reflection layers field by field, as vLLM Semantic Router merges a decision's
memory reflection over the global one: a route that writes only ``max_inject_tokens`` keeps its
recipe's half-life and its tenant defaults' block patterns, although the sources it writes replace
the inherited list."""

from __future__ import annotations

from typing import Any

import yaml
from django_tenants.utils import schema_context

from contextplatform.routes.configuration.layering import effective_context
from contextplatform.routes.selectors import existing_route
from tests.conftest import ApiClient, TenantFixture

IMPORT = "/api/v1/routes/import"


def memory(**fields: Any) -> dict[str, Any]:
    return {"type": "memory", **fields}


def plugin(**configuration: Any) -> list[dict[str, Any]]:
    return [{"type": "context", "configuration": configuration}]


def test_a_routes_reflection_keeps_the_recipes_and_the_defaults_other_fields(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    document = {
        "defaults": {
            "plugins": plugin(sources=[memory(reflection={"block_patterns": ["(?i)password"]})])
        },
        "recipes": [
            {
                "name": "remembering",
                "plugins": plugin(
                    sources=[
                        memory(
                            reflection={"recency_half_life_days": 7, "dedup_threshold": 0.8},
                            priority=60,
                        )
                    ]
                ),
            }
        ],
        "routes": [
            {
                "name": "support",
                "recipe": "remembering",
                "plugins": plugin(sources=[memory(reflection={"max_inject_tokens": 300})]),
            },
            # vLLM Semantic Router's name for the half-life, written by the route, wins.
            {
                "name": "recent",
                "recipe": "remembering",
                "plugins": plugin(sources=[memory(reflection={"recency_decay_days": 2})]),
            },
        ],
    }
    response = acme_api.post(IMPORT, raw=yaml.safe_dump(document), content_type="application/yaml")
    assert response.status_code == 200, response.content

    route = acme_api.get("/api/v1/routes/support").json()
    (written,) = route["context"]["sources"]
    assert written["reflection"] == {"max_inject_tokens": 300}  # what the route writes, as is
    (effective,) = route["effective_context"]["sources"]
    layered = {
        "block_patterns": ["(?i)password"],  # the defaults'
        "recency_half_life_days": 7,  # the recipe's
        "dedup_threshold": 0.8,  # the recipe's
        "max_inject_tokens": 300,  # the route's
    }
    assert effective["reflection"].items() >= layered.items()
    assert effective["priority"] == 70  # the rest of the source is the route's (its default)

    with schema_context(acme.schema):
        (source,) = existing_route("support").spec().context.sources or []
        reflection = source.reflection  # type: ignore[attr-defined]
        assert (reflection.max_inject_tokens, reflection.recency_half_life_days) == (300, 7)
        assert (reflection.dedup_threshold, reflection.block_patterns) == (0.8, ["(?i)password"])
        (recent,) = existing_route("recent").spec().context.sources or []
        assert recent.reflection.recency_half_life_days == 2  # type: ignore[attr-defined]
        assert recent.reflection.max_inject_tokens == 2048  # type: ignore[attr-defined]


def test_only_the_memory_source_it_stands_for_is_layered() -> None:
    recipe = {
        "sources": [
            memory(name="facts", reflection={"recency_half_life_days": 7}),
            memory(name="prefs", reflection={"dedup_threshold": 0.5}),
            {"type": "rag", "name": "memory", "reflection": {"x": 1}},
        ]
    }
    route = {"sources": [memory(name="prefs", reflection={"max_inject_tokens": 100}), memory()]}
    merged = effective_context(recipe, route)
    assert merged["sources"] == [
        memory(name="prefs", reflection={"dedup_threshold": 0.5, "max_inject_tokens": 100}),
        memory(),  # named "memory": no inherited memory source of that name
    ]
    # A written source without reflection inherits it whole; sources: [] still drops them all.
    assert effective_context(recipe, {"sources": [memory(name="facts")]})["sources"] == [
        memory(name="facts", reflection={"recency_half_life_days": 7})
    ]
    assert effective_context(recipe, {"sources": []})["sources"] == []
    # What is not a source is passed on for the validation to name.
    assert effective_context(recipe, {"sources": [5, {"type": ["memory"]}]})["sources"] == [
        5,
        {"type": ["memory"]},
    ]
