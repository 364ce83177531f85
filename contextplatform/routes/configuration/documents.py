"""Routes as documents: YAML or JSON in (decoded to plain JSON values under size and depth
limits), a route exported with its recipe so the document imports on its own, and the check of a
document written offline (``migrate_config``) against what the import would refuse."""

from __future__ import annotations

import json
from typing import Any

import yaml

from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.core.text_limits import (
    DEPTH_PROBLEM,
    MAX_JSON_DEPTH,
    BadText,
    number_problem,
    text_problem,
)
from contextplatform.routes.configuration.layering import effective_context, layered_variants
from contextplatform.routes.configuration.schema import (
    ConfigDocument,
    parse_config_document,
    validate_context,
    validate_route_spec,
)
from contextplatform.routes.configuration.vsr_files import (
    FRAGMENT_KEYS,
    ImportTarget,
    translate,
)

EXPORT_FORMATS = ("yaml", "json")
MAX_DOCUMENT_VALUES = 200_000


def dump_yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)


def _constant(name: str) -> float:
    """NaN and the infinities, read to be refused naming where they are (``_plain``)."""
    return float(name)


def _load_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_constant)
    except ValueError as error:
        raise invalid_request(f"body: not valid JSON: {error}") from None


def _load_yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise invalid_request(f"body: not valid YAML: {problem}{where}") from None


def _plain(value: Any, path: str, budget: list[int], depth: int = 0) -> Any:
    """The document as JSON values (YAML also has dates, sets, binary, non-string keys, and aliases
    that repeat a subtree: the budget of values bounds what the aliases expand to), under the
    boundary's limits of nesting, numbers and text (core/text_limits.py)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise invalid_request(f"body: over {MAX_DOCUMENT_VALUES} values; split the document")
    if isinstance(value, dict | list) and depth >= MAX_JSON_DEPTH:
        raise invalid_request(f"{path or 'body'}: {DEPTH_PROBLEM}", path or None)
    if isinstance(value, dict):
        plain: dict[str, Any] = {}
        for key, member in value.items():
            if not isinstance(key, str):
                raise invalid_request(
                    f"{path or 'body'}: key {key!r} is not text; quote it", path or None
                )
            if problem := text_problem(key):  # YAML escapes both: "\0", "\ud800"
                raise BadText(path or None, problem, key=key).error()
            member_path = f"{path}.{key}" if path else key
            plain[key] = _plain(member, member_path, budget, depth + 1)
        return plain
    if isinstance(value, list):
        return [_plain(item, f"{path}[{i}]", budget, depth + 1) for i, item in enumerate(value)]
    if problem := number_problem(value):
        raise invalid_request(f"{path or 'body'}: {problem}", path or None)
    if isinstance(value, str) and (problem := text_problem(value)):
        raise BadText(path or None, problem).error()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    kind = type(value).__name__
    raise invalid_request(f"{path}: a YAML {kind} is not a JSON value; quote it", path or None)


def decode_document(body: bytes, content_type: str) -> Any:
    """YAML or JSON, by Content-Type, else JSON first and then YAML (the API's size limit applies
    before this reads anything)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request("body: not UTF-8 text") from None
    if not text.strip():
        raise invalid_request("body: empty; send the document as YAML or JSON")
    media_type = content_type.split(";")[0].strip().lower()
    try:
        if "json" in media_type:
            data = _load_json(text)
        elif "yaml" in media_type:
            data = _load_yaml(text)
        else:
            try:
                data = json.loads(text, parse_constant=_constant)
            except ValueError:
                data = _load_yaml(text)
        return _plain(data, "", [MAX_DOCUMENT_VALUES])
    except RecursionError:
        raise invalid_request(f"body: {DEPTH_PROBLEM}") from None


def import_problem(data: Any) -> str | None:
    """Why ``data`` would not import as it is (``POST /api/v1/routes/import``; a fragment as onto
    a new route), or None. Checked without a tenant: the document's shape and each layer's
    configuration as the import layers it (the defaults, the route's recipe when the document
    has it, the route), not what only a tenant knows (its deployments, recipes and routes)."""
    fragment = isinstance(data, dict) and any(key in data for key in FRAGMENT_KEYS)
    target = ImportTarget("route", "fragment") if fragment else None
    try:
        translated = translate(data, target, existing_route=lambda name: None)
        with translated.original_paths():
            check_layers(parse_config_document(translated.document))
    except ApiError as error:
        return error.message
    return None


def check_layers(document: ConfigDocument) -> None:
    defaults = document.defaults.context if document.defaults else {}
    if document.defaults is not None:
        validate_context(defaults, prefix=document.defaults.context_path, stored=True)
    recipes = {entry.name: entry for entry in document.recipes}
    for recipe in document.recipes:
        layered = effective_context(defaults, recipe.context)
        validate_context(layered, prefix=recipe.context_path, stored=True)
    for route in document.routes:
        named = route.route.get("recipe")
        if isinstance(named, str) and named not in recipes:
            continue  # layered on a recipe of the tenant's: checked when it is imported
        recipe = recipes[named].context if isinstance(named, str) else None
        layered = effective_context(defaults, recipe, route.context)
        variants = route.route.get("variants")
        validate_route_spec(
            {
                **route.route,
                "context": layered,
                **({"variants": layered_variants(variants, defaults, recipe)} if variants else {}),
            },
            prefix=route.path,
            context_prefix=route.context_path,
            stored=True,
        )
