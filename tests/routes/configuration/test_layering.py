"""The pure merge of context layers: tenant defaults, then a recipe, then the route."""

from __future__ import annotations

import copy
from typing import Any

from contextplatform.routes.configuration.layering import (
    effective_context,
    merge_layer,
    merge_values,
)

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
PROFILE = {"type": "user_profile"}
HISTORY = {"type": "recent_messages", "last_n_turns": 4}

DEFAULTS: dict[str, Any] = {
    "sources": [RULES, PROFILE],
    "compress": {
        "mode": "auto",
        "targets": {"tool_outputs": {"mode": "extractive", "min_tokens": 3000}},
        "signals": {"enabled": True, "max_tokens": 512},
    },
    "budget": {"max_tokens": "auto", "context_tokens": 2000},
    "injection": {"mode": "tool_role"},
}


def test_no_layers_is_empty() -> None:
    assert effective_context() == {}
    assert effective_context(None, {}, None) == {}


def test_a_route_with_nothing_inherits_everything() -> None:
    assert effective_context(DEFAULTS, None, {}) == DEFAULTS


def test_fields_are_merged_at_any_depth() -> None:
    route = {
        "compress": {
            "targets": {"tool_outputs": {"target_tokens": 500}},
            "failure_mode": "fail_closed",
        },
        "budget": {"context_tokens": 900},
    }
    merged = effective_context(DEFAULTS, route)
    assert merged["compress"] == {
        "mode": "auto",
        "targets": {
            "tool_outputs": {"mode": "extractive", "min_tokens": 3000, "target_tokens": 500}
        },
        "signals": {"enabled": True, "max_tokens": 512},
        "failure_mode": "fail_closed",
    }
    assert merged["budget"] == {"max_tokens": "auto", "context_tokens": 900}
    assert merged["sources"] == [RULES, PROFILE]
    assert merged["injection"] == {"mode": "tool_role"}


def test_sources_written_replace_the_inherited_whole() -> None:
    merged = effective_context(DEFAULTS, {"sources": [HISTORY]})
    assert merged["sources"] == [HISTORY]
    # Even a source of the same name is replaced, not merged member by member.
    renamed = {"type": "skill_guardrails", "name": "rules", "texts": ["Be brief."]}
    assert effective_context(DEFAULTS, {"sources": [renamed]})["sources"] == [renamed]
    # An empty list turns the inherited sources off.
    assert effective_context(DEFAULTS, {"sources": []})["sources"] == []


def test_the_recipe_sits_between_the_defaults_and_the_route() -> None:
    recipe = {
        "sources": [HISTORY],
        "injection": {"mode": "system_prompt"},
        "budget": {"context_tokens": 1500},
    }
    route = {"budget": {"max_tokens": 60_000}}
    merged = effective_context(DEFAULTS, recipe, route)
    assert merged["sources"] == [HISTORY]  # the recipe's, replacing the defaults'
    assert merged["injection"] == {"mode": "system_prompt"}  # the recipe's
    assert merged["budget"] == {"max_tokens": 60_000, "context_tokens": 1500}  # route over recipe
    assert merged["compress"] == DEFAULTS["compress"]  # the defaults'
    # The route wins over the recipe where both write.
    assert effective_context(DEFAULTS, recipe, {"injection": {"mode": "tool_role"}})[
        "injection"
    ] == {"mode": "tool_role"}


def test_other_lists_and_scalars_replace_and_null_is_written() -> None:
    route = {
        "enabled": False,
        "compress": {"signals": {"skip_signals": ["pii"]}, "match": None},
        "budget": {"context_tokens": None},
    }
    merged = effective_context(
        {"compress": {"signals": {"skip_signals": ["jailbreak", "pii"]}}}, route
    )
    assert merged["enabled"] is False
    assert merged["compress"]["signals"]["skip_signals"] == ["pii"]
    assert merged["compress"]["match"] is None
    assert merged["budget"] == {"context_tokens": None}
    # A route that writes compress: null drops the inherited compression.
    assert effective_context(DEFAULTS, {"compress": None})["compress"] is None


def test_an_object_replaces_a_scalar_and_back() -> None:
    assert merge_values("auto", {"a": 1}) == {"a": 1}
    assert merge_values({"a": 1}, 5) == 5
    assert merge_layer({"budget": 3}, {"budget": {"max_tokens": 10}}) == {
        "budget": {"max_tokens": 10}
    }


def test_the_inputs_are_never_changed_and_the_result_shares_nothing() -> None:
    defaults = copy.deepcopy(DEFAULTS)
    recipe = {"compress": {"targets": {"history": {"mode": "extractive"}}}}
    route = {"sources": [copy.deepcopy(HISTORY)]}
    snapshot = copy.deepcopy((defaults, recipe, route))
    merged = effective_context(defaults, recipe, route)
    merged["compress"]["targets"]["tool_outputs"]["min_tokens"] = 1
    merged["sources"][0]["last_n_turns"] = 99
    merged["budget"]["context_tokens"] = 1
    assert (defaults, recipe, route) == snapshot


def test_key_order_follows_the_least_specific_layer() -> None:
    merged = effective_context({"sources": [], "budget": {}}, {"injection": {}, "sources": [RULES]})
    assert list(merged) == ["sources", "budget", "injection"]
