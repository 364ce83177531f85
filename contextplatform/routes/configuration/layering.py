"""Layering of context configurations: tenant defaults, then a recipe, then the route.

The order follows vLLM Semantic Router's context plugin (its global plugins, then the recipe's,
then the decision's); the rules as the project states them are in docs/configuration.md
("Layering").

Each layer is a partial context configuration (the shape of a route's ``context``, every field
optional). A more specific layer wins field by field: objects are merged member by member, at any
depth; anything else a layer writes (a number, a string, ``null``, a list) replaces what it
inherits. ``sources`` is the one field the rule names on its own, as vLLM Semantic Router does: a
layer that writes ``sources`` (even ``[]``) replaces the inherited list whole (it always would,
being a list; this module says so explicitly so that no future change to list handling can start
merging sources).

Pure functions: no database, no validation. The caller validates the merged result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

REPLACED_WHOLE: frozenset[str] = frozenset({"sources"})


def merge_values(inherited: Any, written: Any) -> Any:
    """``written`` over ``inherited``: objects merge member by member, anything else replaces.

    The result shares nothing with either argument."""
    if isinstance(inherited, Mapping) and isinstance(written, Mapping):
        return _merge_members(inherited, written, replaced=frozenset())
    return copy.deepcopy(written)


def merge_layer(inherited: Mapping[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """One context layer over another; ``sources`` written by ``written`` replace the inherited."""
    return _merge_members(inherited, written, replaced=REPLACED_WHOLE)


def effective_context(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge layers from the least specific to the most specific; ``None`` layers are skipped."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged = merge_layer(merged, layer)
    return merged


def _merge_members(
    inherited: Mapping[str, Any], written: Mapping[str, Any], *, replaced: frozenset[str]
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key, value in inherited.items():
        if key not in written:
            merged[key] = copy.deepcopy(value)
        elif key in replaced:
            merged[key] = copy.deepcopy(written[key])
        else:
            merged[key] = merge_values(value, written[key])
    for key, value in written.items():
        if key not in inherited:
            merged[key] = copy.deepcopy(value)
    return merged
