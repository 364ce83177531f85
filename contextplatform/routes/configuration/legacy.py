"""Legacy configuration: the hints that refuse it and the rewrite to the context plugin.

The rewrite follows vLLM Semantic Router's own migration (``vllm-sr config migrate``) from its
separate ``rag``, ``memory`` and ``context_compression`` plugins to the one context plugin; the
project's form of it is under "Legacy configuration" in docs/configuration.md.

The ``rag``, ``memory`` and ``context_compression`` plugins are sources, ``compress`` and ``budget``
of the ``context`` plugin; their removed fields move as follows:

* RAG ``top_k`` / ``similarity_threshold`` → ``match.recall`` (a field not written keeps the legacy
  default, 5 documents with a similarity of at least 0.7, so the source keeps what the plugin
  kept); ``rerank.top_k`` → ``match.judge.top_k`` (the relevance judge replaces the reranker);
  ``injection_mode`` → the plugin's ``injection.mode``; ``min_confidence_threshold`` is dropped
  (routes have no fact-check rules); a backend the platform registers (``milvus``,
  ``qdrant``, ``openai``, ...) keeps its settings the backend takes, and ``vectorstore``'s
  ``vector_store_id`` is the collection; ``milvus`` and ``qdrant`` are read from the platform's
  vector store only where those backends are not installed.
* Memory ``retrieval_limit`` / ``similarity_threshold`` → ``match.recall`` (only what is
  written), the global store's ``default_retrieval_limit`` / ``default_similarity_threshold`` →
  the source's ``store`` block, ``auto_store`` → ``store.auto``.
* Compression ``scoring.method: bm25`` → ``compress.match: {recall: {method: bm25}}`` (embedding
  scoring is replaced by the relevance judge, the default); ``budget.target_tokens`` →
  ``budget.max_tokens``; ``trigger_tokens`` is dropped; a compress block that held nothing gets
  ``mode: auto``.
* ``prompt_compression`` (top level or ``global.model_catalog.modules``) → ``compress.signals`` of
  the defaults' context plugin; ``global.plugins`` → ``defaults.plugins``; an enabled global
  ``memory`` store becomes a memory source of the defaults, and of every route or recipe that
  writes its own sources (which replace the inherited ones); ``decisions`` /
  ``routing.decisions`` → ``routes``.
* A fragment (``plugin:`` or ``plugins:``, one decision's plugins) is rewritten as a fragment: its
  legacy plugins folded into one context plugin.

``migrate_document`` is pure: it returns the rewritten document and notes on what it dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MIGRATE_HINT = "run python manage.py migrate_config FILE"

LEGACY_PLUGINS: dict[str, str] = {
    "rag": "the 'rag' plugin is now a source of the context plugin",
    "memory": "the 'memory' plugin is now a source of the context plugin",
    "context_compression": (
        "the 'context_compression' plugin is now the compress and budget of the context plugin"
    ),
}
PLUGIN_ALIASES = {"context-compression": "context_compression"}

# Refused at the top of an imported document (``global``, ``routing`` and ``decisions`` import as
# vLLM Semantic Router writes them: configuration/vsr_files.py).
LEGACY_TOP_LEVEL: dict[str, str] = {
    "prompt_compression": "prompt_compression is now compress.signals of the defaults",
    "memory": "the global memory store is now a memory source of the defaults",
    "semantic_cache": "semantic_cache is not a setting of this platform",
    "vector_store": "the vector store is the platform's own (collections)",
}

LEGACY_SOURCE_FIELDS: dict[str, dict[str, str]] = {
    "rag": {
        "top_k": "top_k is now match.recall.top_k",
        "similarity_threshold": "similarity_threshold is now match.recall.min_similarity",
        "rerank": "rerank is now match.judge (the relevance judge replaces the reranker)",
        "reranker": "the reranker is replaced by match.judge",
        "min_confidence_threshold": "min_confidence_threshold was removed",
        "injection_mode": "injection_mode is now the context plugin's injection.mode",
    },
    "memory": {
        "retrieval_limit": "retrieval_limit is now match.recall.top_k",
        "similarity_threshold": "similarity_threshold is now match.recall.min_similarity",
        "auto_store": "auto_store is now store.auto",
    },
}
LEGACY_COMPRESS_FIELDS: dict[str, str] = {
    "scoring": "scoring was removed: bm25 is match.recall.method bm25, embedding is the judge",
    "budget": "budget is a field of the context plugin, beside compress",
    "enabled": "compress has no enabled; leave compress out to turn compression off",
}
LEGACY_BUDGET_FIELDS: dict[str, str] = {
    "target_tokens": "budget.target_tokens is now budget.max_tokens",
    "trigger_tokens": "budget.trigger_tokens was removed",
}
COMPRESS_FIELDS = ("mode", "targets", "failure_mode", "recovery", "request_controls")
LEGACY_CONFIGURATION_FIELDS: dict[str, str] = {
    **{name: f"{name} is now compress.{name}" for name in COMPRESS_FIELDS},
    "scoring": LEGACY_COMPRESS_FIELDS["scoring"],
    "injection_mode": "injection_mode is now injection.mode",
}

RAG_LEGACY_TOP_K = 5
RAG_LEGACY_MIN_SIMILARITY = 0.7
SIGNALS_FIELDS = (
    "enabled",
    "profile",
    "max_tokens",
    "min_length",
    "skip_signals",
    "textrank_weight",
    "position_weight",
    "tfidf_weight",
    "novelty_weight",
    "position_depth",
    "preserve_first_n",
    "preserve_last_n",
)
SOURCE_COMMON_FIELDS = ("name", "enabled", "priority", "timeout_ms", "on_failure")
RAG_KEPT_FIELDS = (
    *SOURCE_COMMON_FIELDS,
    "match",
    "filter",
    "max_context_length",
    "cache_results",
    "cache_ttl_seconds",
)
MEMORY_KEPT_FIELDS = (*SOURCE_COMMON_FIELDS, "match", "hybrid_search", "reflection", "store")
REFLECTION_FIELDS = (
    "enabled",
    "max_inject_tokens",
    "recency_half_life_days",
    "recency_decay_days",
    "dedup_threshold",
    "block_patterns",
)


# --- hints: refuse legacy configuration in one line ---------------------------------------------


def hint(param: str, what: str) -> str:
    return f"{param}: {what}; {MIGRATE_HINT}"


def legacy_plugin_hint(plugin_type: str, param: str) -> str | None:
    what = LEGACY_PLUGINS.get(PLUGIN_ALIASES.get(plugin_type, plugin_type))
    return hint(param, what) if what else None


def legacy_top_level_hint(key: str, param: str) -> str | None:
    what = LEGACY_TOP_LEVEL.get(key)
    return hint(param, what) if what else None


def legacy_configuration_hint(configuration: Any, path: str) -> tuple[str, str] | None:
    """The first removed field in a context plugin's configuration: ``(param, message)``."""
    if not isinstance(configuration, dict):
        return None
    for key, what in LEGACY_CONFIGURATION_FIELDS.items():
        if key in configuration:
            return _found(f"{path}.{key}", what)
    sources = configuration.get("sources")
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        if isinstance(source, dict):
            fields = LEGACY_SOURCE_FIELDS.get(str(source.get("type")), {})
            for key, what in fields.items():
                if key in source:
                    return _found(f"{path}.sources[{index}].{key}", what)
    for section, fields in (("compress", LEGACY_COMPRESS_FIELDS), ("budget", LEGACY_BUDGET_FIELDS)):
        block = configuration.get(section)
        if isinstance(block, dict):
            for key, what in fields.items():
                if key in block:
                    return _found(f"{path}.{section}.{key}", what)
    return None


def _found(param: str, what: str) -> tuple[str, str]:
    return param, hint(param, what)


def legacy_plugin_anywhere(data: Any) -> tuple[str, str] | None:
    """The first legacy plugin wherever a pasted document may hold one, ``(param, message)``: a
    fragment (``plugin:``, ``plugins:``), ``global.plugins``, a decision's plugins (``decisions``,
    ``routing.decisions``, and those of ``recipes``), and the platform's own layers (``defaults``,
    ``recipes``, ``routes``). Asked before any other question about the document, so a legacy
    fragment pasted as it is gets the one hint that fixes it rather than a complaint about its
    shape (a layer it does not name, a key it should not have)."""
    if not isinstance(data, dict):
        return None
    for base, plugins in _plugin_lists(data):
        if base == "plugin":
            plugins = [plugins]
        for index, plugin in enumerate(plugins if isinstance(plugins, list) else []):
            kind = plugin.get("type") if isinstance(plugin, dict) else None
            param = base if base == "plugin" else f"{base}[{index}]"
            found = legacy_plugin_hint(kind, param) if isinstance(kind, str) else None
            if found:
                return param, found
    return None


def _plugin_lists(data: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    for key in ("plugin", "plugins"):
        if key in data:
            yield key, data[key]
    for key in ("global", "defaults"):
        layer = data.get(key)
        if isinstance(layer, dict) and "plugins" in layer:
            yield f"{key}.plugins", layer["plugins"]
    yield from _decision_plugins(data, "")
    for key in ("recipes", "routes"):
        entries = data.get(key)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict):
                if "plugins" in entry:
                    yield f"{key}[{index}].plugins", entry["plugins"]
                yield from _decision_plugins(entry, f"{key}[{index}].")


def _decision_plugins(holder: dict[str, Any], prefix: str) -> Iterable[tuple[str, Any]]:
    routing = holder.get("routing")
    for base, decisions in (
        ("decisions", holder.get("decisions")),
        ("routing.decisions", routing.get("decisions") if isinstance(routing, dict) else None),
    ):
        for index, decision in enumerate(decisions if isinstance(decisions, list) else []):
            if isinstance(decision, dict) and "plugins" in decision:
                yield f"{prefix}{base}[{index}].plugins", decision["plugins"]


# --- the rewrite --------------------------------------------------------------------------------


class MigrationError(ValueError):
    """The file cannot be rewritten (not a configuration document)."""


@dataclass
class Migration:
    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Run:
    """State of one rewrite: the global memory store (if enabled) and the notes."""

    memory_store: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def note(self, path: str, message: str) -> None:
        self.notes.append(f"{path}: {message}")

    def note_dropped(
        self, settings: dict[str, Any], handled: Iterable[str], path: str, message: str
    ) -> None:
        """A note for each key of ``settings`` the rewrite did not handle, in key order."""
        for key in sorted(set(settings) - set(handled)):
            self.note(f"{path}.{key}", message)


def migrate_document(data: Any) -> Migration:
    """Rewrite a legacy configuration document to the context plugin's form (idempotent)."""
    if not isinstance(data, dict):
        raise MigrationError("expected a mapping with routes (and optionally recipes, defaults)")
    data = copy.deepcopy(data)
    run = _Run()
    if set(data) & set(FRAGMENT_KEYS):
        return _migrate_fragment(data, run)
    run.memory_store = _global_memory(data, run)
    document: dict[str, Any] = {}
    defaults = _migrate_defaults(data, run)
    if defaults is not None:
        document["defaults"] = defaults
    recipes = data.pop("recipes", None)
    if recipes is not None:
        document["recipes"] = [
            _migrate_entry(recipe, f"recipes[{index}]", run)
            for index, recipe in enumerate(_as_list(recipes, "recipes"))
        ]
    routes = _legacy_routes(data, run)
    if routes is not None:
        document["routes"] = [
            _migrate_entry(route, f"routes[{index}]", run) for index, route in enumerate(routes)
        ]
    for key in data:
        run.note(key, "not a setting of this platform; dropped")
    return Migration(document=document, notes=run.notes)


FRAGMENT_KEYS = ("plugin", "plugins")


def _migrate_fragment(data: dict[str, Any], run: _Run) -> Migration:
    """``plugin:`` or ``plugins:`` (one decision's plugins, as vLLM Semantic Router's fragments
    are written): the same fragment, its legacy plugins folded into the context plugin."""
    present = [key for key in FRAGMENT_KEYS if key in data]
    if len(present) > 1 or len(data) > 1:
        raise MigrationError("a plugin fragment holds one plugin: or plugins: and nothing else")
    key = present[0]
    if key == "plugin":
        plugin = _as_dict(data["plugin"], "plugin")
        migrated = _migrate_plugins([plugin], "plugin", run)
        document = {"plugin": migrated[0]} if len(migrated) == 1 else {"plugins": migrated}
        run.notes = [note.replace("plugin[0]", "plugin", 1) for note in run.notes]
    else:
        document = {
            "plugins": _migrate_plugins(_as_list(data["plugins"], "plugins"), "plugins", run)
        }
    return Migration(document=document, notes=run.notes)


def _as_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise MigrationError(f"{path}: expected a list")
    return value


def _as_dict(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MigrationError(f"{path}: expected a mapping")
    return value


def _pop_path(data: dict[str, Any], *keys: str) -> Any:
    """Remove and return ``data[k1][k2]...``; emptied parents are removed too."""
    parent = data
    for key in keys[:-1]:
        child = parent.get(key)
        if not isinstance(child, dict):
            return None
        parent = child
    value = parent.pop(keys[-1], None)
    if len(keys) > 1 and not parent:
        _pop_path(data, *keys[:-1])
    return value


MEMORY_STORE_FIELDS = (
    "enabled",
    "auto_store",
    "default_retrieval_limit",
    "default_similarity_threshold",
    "hybrid_search",
    "hybrid_mode",
    "reflection",
)


def _global_memory(data: dict[str, Any], run: _Run) -> dict[str, Any] | None:
    store = _pop_path(data, "memory") or _pop_path(data, "global", "stores", "memory")
    if store is None:
        return None
    store = _as_dict(store, "memory")
    dropped = sorted(set(store) - set(MEMORY_STORE_FIELDS))
    if dropped:
        run.note(
            "memory", f"the platform keeps memories in its database; dropped {', '.join(dropped)}"
        )
    return store if store.get("enabled", True) else None


def _legacy_routes(data: dict[str, Any], run: _Run) -> list[Any] | None:
    routes = data.pop("routes", None)
    decisions = data.pop("decisions", None) or _pop_path(data, "routing", "decisions")
    if routes is not None and decisions is not None:
        raise MigrationError("routes and decisions: write one of them")
    if decisions is not None:
        run.note("decisions", "rewritten as routes")
        return [_decision_as_route(d, f"decisions[{i}]", run) for i, d in enumerate(decisions)]
    return None if routes is None else _as_list(routes, "routes")


def _decision_as_route(decision: Any, path: str, run: _Run) -> dict[str, Any]:
    decision = _as_dict(decision, path)
    kept = {key: decision.pop(key) for key in ("name", "description", "plugins") if key in decision}
    for key in decision:
        run.note(f"{path}.{key}", "routes have no such field; dropped")
    return kept


def _migrate_defaults(data: dict[str, Any], run: _Run) -> dict[str, Any] | None:
    defaults = _as_dict(data.pop("defaults", None), "defaults")
    plugins = list(defaults.get("plugins") or [])
    global_plugins = _pop_path(data, "global", "plugins")
    if global_plugins is not None:
        run.note("global.plugins", "rewritten as defaults.plugins")
        plugins += _as_list(global_plugins, "global.plugins")
    signals = _signals(data, run)
    if not (plugins or signals or run.memory_store or defaults):
        return None
    migrated = _migrate_plugins(plugins, "defaults.plugins", run, add_memory=True)
    if signals:
        configuration = _context_configuration(migrated)
        compress = configuration.setdefault("compress", {})
        compress.setdefault("signals", signals)
    return {**defaults, "plugins": migrated}


def _signals(data: dict[str, Any], run: _Run) -> dict[str, Any] | None:
    legacy = (
        _pop_path(data, "prompt_compression")
        or _pop_path(data, "global", "model_catalog", "modules", "prompt_compression")
        or _pop_path(data, "global", "modules", "prompt_compression")
    )
    if legacy is None:
        return None
    legacy = _as_dict(legacy, "prompt_compression")
    if legacy.get("enabled") is False:
        run.note("prompt_compression", "disabled; dropped")
        return None
    signals = {key: legacy[key] for key in SIGNALS_FIELDS if key in legacy and key != "enabled"}
    for key in set(legacy) - set(SIGNALS_FIELDS):
        run.note(f"prompt_compression.{key}", "no longer a setting of signals; dropped")
    run.note("prompt_compression", "rewritten as compress.signals of the defaults")
    return {"enabled": True, **signals}


def _context_configuration(plugins: list[dict[str, Any]]) -> dict[str, Any]:
    for plugin in plugins:
        if plugin.get("type") == "context":
            return plugin.setdefault("configuration", {})
    plugin = {"type": "context", "configuration": {}}
    plugins.insert(0, plugin)
    return plugin["configuration"]


def _migrate_entry(entry: Any, path: str, run: _Run) -> Any:
    """A route or a recipe: its plugins rewritten, everything else kept."""
    if not isinstance(entry, dict) or "plugins" not in entry:
        return entry
    plugins = _as_list(entry["plugins"], f"{path}.plugins")
    return {**entry, "plugins": _migrate_plugins(plugins, f"{path}.plugins", run)}


def _migrate_plugins(
    plugins: list[Any], path: str, run: _Run, *, add_memory: bool = False
) -> list[dict[str, Any]]:
    """Fold the legacy plugins of one list into its context plugin; other plugins are kept."""
    configuration: dict[str, Any] | None = None
    legacy_sources: list[dict[str, Any]] = []
    legacy: dict[str, Any] = {}
    others: list[Any] = []
    for index, plugin in enumerate(plugins):
        where = f"{path}[{index}]"
        plugin_type = plugin.get("type") if isinstance(plugin, dict) else None
        plugin_type = PLUGIN_ALIASES.get(str(plugin_type), plugin_type)
        if plugin_type not in {"context", *LEGACY_PLUGINS}:
            others.append(plugin)
            continue
        settings = _as_dict(plugin.get("configuration"), f"{where}.configuration")
        if plugin_type == "context":
            if configuration is not None:
                raise MigrationError(f"{where}: a second context plugin")
            configuration = copy.deepcopy(settings)
        elif plugin_type == "rag":
            source, injection_mode = _rag_source(settings, f"{where}.configuration", run)
            legacy_sources.append(source)
            if injection_mode is not None:
                legacy["injection"] = {"mode": injection_mode}
        elif plugin_type == "memory":
            legacy_sources.append(_memory_source(settings, f"{where}.configuration", run))
        else:
            legacy.update(_compression(settings, f"{where}.configuration", run))
    if configuration is None and not legacy_sources and not legacy and not add_memory:
        return others
    configuration = _migrate_configuration(configuration or {}, f"{path}.context", run)
    _fold_legacy(configuration, legacy_sources, legacy)
    _add_global_memory(configuration, run, always=add_memory)
    return [{"type": "context", "configuration": configuration}, *others]


def _fold_legacy(
    configuration: dict[str, Any], sources: list[dict[str, Any]], legacy: dict[str, Any]
) -> None:
    if sources:
        configuration["sources"] = [*configuration.get("sources", []), *sources]
    for key in ("compress", "budget", "injection"):
        if key in legacy:
            configuration[key] = {**legacy[key], **configuration.get(key, {})}


def _add_global_memory(configuration: dict[str, Any], run: _Run, *, always: bool) -> None:
    """An enabled global store ran memory for every decision: a layer that writes sources (which
    replace the inherited ones) keeps a memory source, and the defaults get one."""
    if run.memory_store is None or not (always or "sources" in configuration):
        return
    sources = configuration.setdefault("sources", [])
    if not any(isinstance(s, dict) and s.get("type") == "memory" for s in sources):
        sources.append(_memory_source({}, "memory", run))


def _migrate_configuration(configuration: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    """Removed fields left inside a context plugin's configuration."""
    moved = {key: configuration.pop(key) for key in COMPRESS_FIELDS if key in configuration}
    scoring = configuration.pop("scoring", None)
    if moved or scoring is not None:
        compress = configuration.setdefault("compress", {})
        compress.update({key: value for key, value in moved.items() if key not in compress})
        if scoring is not None:
            compress["scoring"] = scoring
    injection_mode = configuration.pop("injection_mode", None)
    if injection_mode is not None:
        configuration.setdefault("injection", {}).setdefault("mode", injection_mode)
    sources = configuration.get("sources")
    if isinstance(sources, list):
        configuration["sources"] = [
            _migrate_source(source, f"{path}.sources[{index}]", run, configuration)
            for index, source in enumerate(sources)
        ]
    compress = configuration.get("compress")
    if isinstance(compress, dict):
        nested_budget = compress.pop("budget", None)
        if isinstance(nested_budget, dict):
            configuration["budget"] = {**nested_budget, **configuration.get("budget", {})}
        if compress.pop("enabled", True) is False:
            run.note(f"{path}.compress", "disabled compression; dropped")
            del configuration["compress"]
        else:
            _scoring_to_match(compress, f"{path}.compress", run)
    if isinstance(configuration.get("budget"), dict):
        configuration["budget"] = _budget(configuration["budget"], f"{path}.budget", run)
    return configuration


def _migrate_source(
    source: Any, path: str, run: _Run, configuration: dict[str, Any]
) -> dict[str, Any]:
    if not isinstance(source, dict):
        return source
    if source.get("type") == "rag" and set(source) & set(LEGACY_SOURCE_FIELDS["rag"]):
        migrated, injection_mode = _rag_source(source, path, run)
        if injection_mode is not None:
            configuration.setdefault("injection", {}).setdefault("mode", injection_mode)
        return migrated
    if source.get("type") == "memory" and set(source) & set(LEGACY_SOURCE_FIELDS["memory"]):
        return _memory_source(source, path, run)
    return source


# --- rag --------------------------------------------------------------------------------------


def _rag_source(settings: dict[str, Any], path: str, run: _Run) -> tuple[dict[str, Any], Any]:
    source: dict[str, Any] = {"type": "rag"}
    source.update({key: settings[key] for key in RAG_KEPT_FIELDS if key in settings})
    source.update(_rag_backend(settings, path, run))
    match = _rag_match(settings)
    if match is not None:
        source["match"] = match
    if "min_confidence_threshold" in settings:
        run.note(f"{path}.min_confidence_threshold", "routes have no fact-check rules; dropped")
    if "reranker" in settings:
        run.note(f"{path}.reranker", "the relevance judge replaces the reranker; dropped")
    handled = {
        *RAG_KEPT_FIELDS,
        *LEGACY_SOURCE_FIELDS["rag"],
        "type",
        "backend",
        "backend_config",
    }
    run.note_dropped(settings, handled, path, "not a field of a rag source; dropped")
    return source, settings.get("injection_mode")


def _rag_match(settings: dict[str, Any]) -> dict[str, Any] | None:
    if "match" in settings:
        return None  # already the new form
    recall = {
        "top_k": settings.get("top_k", RAG_LEGACY_TOP_K),
        "min_similarity": settings.get("similarity_threshold", RAG_LEGACY_MIN_SIMILARITY),
    }
    match: dict[str, Any] = {"recall": {"method": "embedding", **recall}}
    rerank = settings.get("rerank")
    if isinstance(rerank, dict) and rerank.get("enabled", True):
        match["judge"] = {"preset": "relevance"}
        if "top_k" in rerank:
            match["judge"]["top_k"] = rerank["top_k"]
    return match


def _rag_backend(settings: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    backend = settings.get("backend", "vectorstore")
    config = _as_dict(settings.get("backend_config"), f"{path}.backend_config")
    if backend == "hybrid":
        return {"backend": "hybrid", "backend_config": _hybrid(config, path, run)}
    return _backend_spec(backend, config, f"{path}.backend_config", run)


def _backend_spec(backend: Any, config: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    installed = _installed_backend_fields()
    if backend == "vectorstore" or (backend in {"milvus", "qdrant"} and backend not in installed):
        return {
            "backend": "vectorstore",
            "backend_config": _vectorstore(backend, config, path, run),
        }
    if backend == "external_api":
        return {"backend": "external_api", "backend_config": _external_api(config, path, run)}
    if backend in installed:  # the platform has this backend: its own settings, as written
        fields = installed[backend]
        run.note_dropped(config, fields, path, f"not a setting of the {backend} backend; dropped")
        return {
            "backend": backend,
            "backend_config": {key: value for key, value in config.items() if key in fields},
        }
    run.note(path, f"backend {backend!r} is not supported by this platform; left as written")
    return {"backend": backend, "backend_config": config}


def _installed_backend_fields() -> dict[str, frozenset[str]]:
    """The RAG backends registered (``sources.rag.config.BACKEND_CONFIGS``) and their fields."""
    from sources.rag.config import BACKEND_CONFIGS

    return {
        name: frozenset(model.model_fields)
        for name, model in BACKEND_CONFIGS.items()
        if name not in {"vectorstore", "external_api", "hybrid"}
    }


def _vectorstore(backend: str, config: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    if "collections" in config:
        kept = {"collections": config["collections"]}
    else:
        kept = {"collection": config.get("collection") or config.get("vector_store_id")}
    if backend != "vectorstore":
        run.note(path, f"{backend} collection is read from the platform's vector store")
    run.note_dropped(
        config,
        {"collection", "collections", "vector_store_id"},
        path,
        "the platform's vector store has no such setting; dropped",
    )
    return kept


def _external_api(config: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    kept = {
        key: config[key]
        for key in ("endpoint", "method", "headers", "response", "max_response_bytes")
        if key in config
    }
    if "timeout_ms" in config:
        kept["timeout_ms"] = config["timeout_ms"]
    elif isinstance(config.get("timeout_seconds"), int | float):
        kept["timeout_ms"] = int(config["timeout_seconds"] * 1000)
    template = config.get("request_template")
    request_format = config.get("request_format")
    if isinstance(template, dict):
        kept["request_format"] = template
    elif isinstance(request_format, dict):
        kept["request_format"] = request_format
    elif request_format is not None or template is not None:
        run.note(f"{path}.request_format", "write the request body template as a JSON object")
    handled = {*kept, "timeout_seconds", "request_template", "request_format"}
    run.note_dropped(
        config, handled, path, "not a setting of external_api; dropped (keys go in headers)"
    )
    return kept


def _hybrid(config: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    if isinstance(config.get("primary"), dict):
        return config  # already the new form
    hybrid: dict[str, Any] = {}
    for role in ("primary", "fallback"):
        if config.get(role):
            role_config = _as_dict(config.get(f"{role}_config"), f"{path}.{role}_config")
            hybrid[role] = _backend_spec(config[role], role_config, f"{path}.{role}_config", run)
    if "strategy" in config:
        hybrid["strategy"] = config["strategy"]
    return hybrid


# --- memory -----------------------------------------------------------------------------------


def _memory_source(settings: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    store_defaults = run.memory_store or {}
    source: dict[str, Any] = {"type": "memory"}
    source.update({key: settings[key] for key in MEMORY_KEPT_FIELDS if key in settings})
    recall = _memory_recall(settings)
    if recall and "match" not in source:
        source["match"] = {"recall": {"method": "embedding", **recall}}
    store = _memory_store_defaults(store_defaults)
    auto = settings.get("auto_store", store_defaults.get("auto_store"))
    if auto is not None:
        store["auto"] = auto
    if store:
        source["store"] = {**source.get("store", {}), **store}
    _memory_hybrid(source, settings, store_defaults, path, run)
    reflection = settings.get("reflection", store_defaults.get("reflection"))
    if isinstance(reflection, dict):
        source["reflection"] = {k: v for k, v in reflection.items() if k in REFLECTION_FIELDS}
        run.note_dropped(
            reflection,
            REFLECTION_FIELDS,
            f"{path}.reflection",
            "not a setting of the gate; dropped",
        )
    handled = {*MEMORY_KEPT_FIELDS, *LEGACY_SOURCE_FIELDS["memory"], "type", "hybrid_mode"}
    run.note_dropped(settings, handled, path, "not a field of a memory source; dropped")
    return source


def _memory_recall(settings: dict[str, Any]) -> dict[str, Any]:
    """The source's own limit and threshold: only what it wrote (the rest stays the store's, then
    the embedder's default)."""
    recall: dict[str, Any] = {}
    if settings.get("retrieval_limit") is not None:
        recall["top_k"] = settings["retrieval_limit"]
    if settings.get("similarity_threshold") is not None:
        recall["min_similarity"] = settings["similarity_threshold"]
    return recall


def _memory_store_defaults(store: dict[str, Any]) -> dict[str, Any]:
    """The global store's defaults, kept as the store's (the memory source reads them after its
    own match block and before the embedder's defaults)."""
    return {
        key: store[key]
        for key in ("default_retrieval_limit", "default_similarity_threshold")
        if store.get(key) is not None
    }


def _memory_hybrid(
    source: dict[str, Any],
    settings: dict[str, Any],
    store: dict[str, Any],
    path: str,
    run: _Run,
) -> None:
    hybrid = settings.get("hybrid_search", store.get("hybrid_search"))
    if hybrid is not None:
        source["hybrid_search"] = hybrid
    mode = settings.get("hybrid_mode", store.get("hybrid_mode"))
    if mode in {"weighted", "rrf"}:
        source["hybrid_mode"] = mode
    elif mode is not None:
        run.note(f"{path}.hybrid_mode", f"{mode!r} is not a mode (weighted, rrf); weighted it is")


# --- compression ------------------------------------------------------------------------------


def _compression(settings: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    """A context_compression plugin: ``{"compress": ..., "budget": ...}``."""
    if settings.get("enabled") is False:
        run.note(path, "disabled context_compression; dropped")
        return {}
    compress = {key: settings[key] for key in ("mode", "failure_mode") if key in settings}
    if isinstance(settings.get("targets"), dict):
        compress["targets"] = _targets(settings["targets"])
    if isinstance(settings.get("request_controls"), dict):
        compress["request_controls"] = settings["request_controls"]
    recovery = _recovery(settings.get("recovery"), f"{path}.recovery", run)
    if recovery is not None:
        compress["recovery"] = recovery
    if "scoring" in settings:
        compress["scoring"] = settings["scoring"]
    _scoring_to_match(compress, path, run)
    compress.setdefault("mode", "auto")  # so it still compresses its requests
    result: dict[str, Any] = {"compress": compress}
    if isinstance(settings.get("budget"), dict):
        result["budget"] = _budget(settings["budget"], f"{path}.budget", run)
    handled = {*COMPRESS_FIELDS, "enabled", "scoring", "budget"}
    run.note_dropped(settings, handled, path, "not a setting of compress; dropped")
    return result


def _targets(targets: dict[str, Any]) -> dict[str, Any]:
    """Zero meant the default in the legacy plugin: leave such limits out."""
    migrated: dict[str, Any] = {}
    for kind, target in targets.items():
        if isinstance(target, dict):
            target = {
                key: value
                for key, value in target.items()
                if not (key in {"min_tokens", "target_tokens"} and value in (0, None))
            }
        migrated[kind] = target
    return migrated


def _recovery(recovery: Any, path: str, run: _Run) -> dict[str, Any] | None:
    if not isinstance(recovery, dict):
        return None
    if not recovery.get("enabled", False):
        return None
    if "store" in recovery:
        run.note(f"{path}.store", "recovery uses the platform's store; dropped")
    limits = ("ttl_seconds", "max_bytes_per_request", "max_total_bytes", "max_retrievals")
    return {key: recovery[key] for key in limits if recovery.get(key)}


def _scoring_to_match(compress: dict[str, Any], path: str, run: _Run) -> None:
    scoring = compress.pop("scoring", None)
    if not isinstance(scoring, dict):
        return
    method = scoring.get("method", "bm25")
    if method == "bm25":
        compress.setdefault("match", {"recall": {"method": "bm25"}})
    else:
        run.note(f"{path}.scoring", f"{method} scoring is replaced by the relevance judge")


def _budget(budget: dict[str, Any], path: str, run: _Run) -> dict[str, Any]:
    migrated = {key: value for key, value in budget.items() if key not in LEGACY_BUDGET_FIELDS}
    if "target_tokens" in budget and "max_tokens" not in budget:
        migrated["max_tokens"] = _token_limit(budget["target_tokens"])
    if "reserve_output_tokens" in migrated:
        migrated["reserve_output_tokens"] = _token_limit(migrated["reserve_output_tokens"])
    if "trigger_tokens" in budget:
        run.note(f"{path}.trigger_tokens", "removed: mode auto compresses over the budget")
    return migrated


def _token_limit(value: Any) -> Any:
    """The legacy limits took ``"auto"`` in any case, numeric strings, and 0 for auto."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit():
            value = int(text)
    return "auto" if value == 0 else value
