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
merging sources). Within that list, a memory source's ``reflection`` is layered field by field
over the one of the inherited memory source it stands for (the same ``name``; unnamed, a memory
source is named ``memory``), as vLLM Semantic Router merges a decision's memory reflection over the
global one (``resolveReflectionConfig``): a route that writes only ``max_inject_tokens`` keeps the
recipe's and the defaults' half-life, dedup threshold and block patterns.

Pure functions: no database, no validation. The caller validates the merged result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

REPLACED_WHOLE: frozenset[str] = frozenset({"sources"})
# The members of a source, by its type, that layer over the inherited source it stands for even
# though the sources list itself is replaced.
LAYERED_SOURCE_MEMBERS: dict[str, tuple[str, ...]] = {"memory": ("reflection",)}
# Names of one field (the platform's and vLLM Semantic Router's): a layer writing either replaces
# what an earlier one wrote under the other.
SAME_FIELD: tuple[frozenset[str], ...] = (
    frozenset({"recency_half_life_days", "recency_decay_days"}),
)


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


def layered_variants(variants: Any, *layers: Mapping[str, Any] | None) -> Any:
    """A route's variants with each one's context layered as the route's own is: over ``layers``
    (the tenant defaults, then the recipe), never over the route's own context. What is not a
    list of objects with an object ``context`` is left as written, for validation to name."""
    if not isinstance(variants, list):
        return copy.deepcopy(variants)
    return [
        {**variant, "context": effective_context(*layers, variant.get("context") or {})}
        if isinstance(variant, Mapping) and isinstance(variant.get("context", {}), Mapping)
        else copy.deepcopy(variant)
        for variant in variants
    ]


def _merge_members(
    inherited: Mapping[str, Any], written: Mapping[str, Any], *, replaced: frozenset[str]
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key, value in inherited.items():
        if key not in written:
            merged[key] = copy.deepcopy(value)
        elif key == "sources" and key in replaced:
            merged[key] = _layered_sources(value, written[key])
        elif key in replaced:
            merged[key] = copy.deepcopy(written[key])
        else:
            merged[key] = merge_values(value, written[key])
    for key, value in written.items():
        if key not in inherited:
            merged[key] = copy.deepcopy(value)
    return merged


def _source_key(source: Any) -> tuple[str, str] | None:
    """What a source stands for across layers: its type and name (a source's name defaults to its
    type); None for what is not a source (the merged result's validation names it)."""
    if not isinstance(source, Mapping):
        return None
    kind, name = source.get("type"), source.get("name") or source.get("type")
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else None


def _layered_sources(inherited: Any, written: Any) -> Any:
    """The written sources, each memory source's reflection layered over the inherited one's."""
    if not isinstance(inherited, list) or not isinstance(written, list):
        return copy.deepcopy(written)
    before = {key: source for source in inherited if (key := _source_key(source)) is not None}
    layered: list[Any] = []
    for source in written:
        key = _source_key(source)
        members = LAYERED_SOURCE_MEMBERS.get(key[0], ()) if key is not None else ()
        earlier = before.get(key) if key is not None and members else None
        if earlier is None:
            layered.append(copy.deepcopy(source))
            continue
        merged = dict(copy.deepcopy(source))
        for member in members:
            if member in earlier:
                merged[member] = (
                    merge_values(_without_renamed(earlier[member], source[member]), source[member])
                    if member in source
                    else copy.deepcopy(earlier[member])
                )
        layered.append(merged)
    return layered


def _without_renamed(inherited: Any, written: Any) -> Any:
    """``inherited`` without the fields ``written`` writes under another of their names."""
    if not isinstance(inherited, Mapping) or not isinstance(written, Mapping):
        return inherited
    dropped = {
        name for names in SAME_FIELD if names & written.keys() for name in names - written.keys()
    }
    return {key: value for key, value in inherited.items() if key not in dropped}
