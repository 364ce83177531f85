"""Configuration as code: export and import as a YAML or JSON document, layering (tenant defaults,
recipe, route) as resolve runs it, legacy plugins refused with a hint, and ``migrate_config``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tenants.utils import schema_context

from contextplatform.routes.models import Recipe, Route, TenantDefaults
from contextplatform.routes.selectors import route_by_name
from tenants.services import issue_api_key
from tests.compression.conversations import conversation
from tests.conftest import ApiClient, TenantFixture

IMPORT = "/api/v1/routes/import"
RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
HOUSE = {"type": "skill_guardrails", "name": "house", "texts": ["Never promise refunds."]}
HISTORY = {"type": "recent_messages", "last_n_turns": 4}


def context_plugin(**configuration: Any) -> list[dict[str, Any]]:
    return [{"type": "context", "configuration": configuration}]


def route_entry(name: str = "support", **configuration: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "Customer support",
        "model": {"context_window": 32_000, "max_output_tokens": 1024},
        "plugins": context_plugin(**configuration),
    }


def import_yaml(api: ApiClient, document: Any, content_type: str = "application/yaml") -> Any:
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    return api.post(IMPORT, raw=text, content_type=content_type)


def imported(api: ApiClient, document: Any, **kwargs: Any) -> dict[str, Any]:
    response = import_yaml(api, document, **kwargs)
    assert response.status_code == 200, response.content
    return response.json()


def error_of(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert "\n" not in error["message"]
    return error


def stored(schema: str, name: str) -> dict[str, Any]:
    with schema_context(schema):
        route = Route.objects.select_related("recipe").get(name=name)
        return {
            "name": route.name,
            "description": route.description,
            "context_window": route.context_window,
            "max_output_tokens": route.max_output_tokens,
            "model": route.model,
            "context": route.context,
            "recipe": route.recipe.name if route.recipe else None,
        }


def chat(text: str = "Where is my parcel?") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def resolve(api: ApiClient, route: str, request: dict[str, Any] | None = None) -> Any:
    return api.post("/api/v1/resolve", {"route": route, "request": request or chat()})


def resolved(api: ApiClient, route: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
    response = resolve(api, route, request)
    assert response.status_code == 200, response.content
    return response.json()


def source_names(report: dict[str, Any]) -> list[str]:
    return [source["name"] for source in report["sources"]]


# --- export and import ------------------------------------------------------------------------


FULL_CONFIGURATION: dict[str, Any] = {
    "enabled": True,
    "sources": [RULES, {"type": "user_profile", "timeout_ms": 300, "on_failure": "warn"}, HISTORY],
    "compress": {
        "mode": "auto",
        "targets": {
            "tool_outputs": {"mode": "extractive", "min_tokens": 2000, "target_tokens": 800}
        },
        "failure_mode": "fail_open",
    },
    "budget": {"max_tokens": "auto", "reserve_output_tokens": "auto", "context_tokens": 2000},
    "injection": {"mode": "system_prompt"},
}


def test_export_is_the_plugin_document_in_yaml_or_json(acme_api: ApiClient) -> None:
    imported(acme_api, {"routes": [route_entry(**FULL_CONFIGURATION)]})
    response = acme_api.get("/api/v1/routes/support/export")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/yaml")
    document = yaml.safe_load(response.content)
    assert list(document) == ["routes"]
    route = document["routes"][0]
    assert route == {
        "name": "support",
        "description": "Customer support",
        "model": {"context_window": 32_000, "max_output_tokens": 1024},
        "recipe": None,
        "plugins": [{"type": "context", "configuration": FULL_CONFIGURATION}],
    }
    as_json = acme_api.get("/api/v1/routes/support/export", {"format": "json"})
    assert as_json.status_code == 200 and as_json["Content-Type"] == "application/json"
    assert as_json.json() == document

    error = error_of(acme_api.get("/api/v1/routes/support/export", {"format": "toml"}))
    assert error["param"] == "format"
    assert error_of(acme_api.get("/api/v1/routes/nope/export"), 404)["code"] == "not_found"


def test_export_then_import_gives_an_identical_route(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created = acme_api.post(
        "/api/v1/routes",
        {
            "name": "support",
            "description": "Customer support",
            "model": {"name": "gpt-4o-mini", "context_window": 32_000, "max_output_tokens": 1024},
            "context": {"sources": [RULES, HISTORY], "budget": {"context_tokens": 2000}},
        },
    )
    assert created.status_code == 201, created.content
    imported(
        acme_api,
        {
            "recipes": [
                {"name": "strict", "plugins": context_plugin(injection={"mode": "system_prompt"})}
            ]
        },
    )
    assert acme_api.patch("/api/v1/routes/support", {"recipe": "strict"}).status_code == 200
    before = stored(acme.schema, "support")
    exported = acme_api.get("/api/v1/routes/support/export").content.decode()

    # Over the existing route: updated, nothing changes.
    assert imported(acme_api, exported) == {
        "imported": ["support"],
        "created": 0,
        "updated": 1,
        "recipes": ["strict"],
        "defaults": False,
    }
    assert stored(acme.schema, "support") == before

    # After a delete: created again, identical; the document carries its recipe.
    assert acme_api.delete("/api/v1/routes/support").status_code == 204
    assert imported(acme_api, exported)["created"] == 1
    assert stored(acme.schema, "support") == before
    assert acme_api.get("/api/v1/routes/support/export").content.decode() == exported


def test_import_by_content_type_or_by_trying_json_then_yaml(acme_api: ApiClient) -> None:
    document = {"routes": [route_entry("a", sources=[RULES])]}
    assert imported(acme_api, json.dumps(document), content_type="application/json")["created"] == 1
    document["routes"][0]["name"] = "b"
    assert imported(acme_api, json.dumps(document), content_type="text/plain")["created"] == 1
    document["routes"][0]["name"] = "c"
    assert imported(acme_api, yaml.safe_dump(document), content_type="text/plain")["created"] == 1
    document["routes"][0]["name"] = "d"
    assert imported(acme_api, yaml.safe_dump(document), content_type="text/yaml")["created"] == 1
    names = [r["name"] for r in acme_api.get("/api/v1/routes").json()["data"]]
    assert names == ["a", "b", "c", "d"]

    # YAML sent as JSON is not JSON.
    error = error_of(import_yaml(acme_api, document, content_type="application/json"))
    assert error["message"].startswith("body: not valid JSON")


def test_a_route_without_plugins_inherits_everything(acme_api: ApiClient) -> None:
    result = imported(
        acme_api,
        {
            "defaults": {"plugins": context_plugin(sources=[RULES])},
            "routes": [{"name": "bare"}],
        },
    )
    assert result["imported"] == ["bare"] and result["defaults"] is True
    route = acme_api.get("/api/v1/routes/bare").json()
    assert route["context"] == {}
    assert route["effective_context"]["sources"][0]["name"] == "rules"
    exported = yaml.safe_load(acme_api.get("/api/v1/routes/bare/export").content)
    assert exported["routes"][0]["plugins"] == [{"type": "context", "configuration": {}}]


# --- all or nothing, and errors naming the path -----------------------------------------------


def test_import_is_all_or_nothing(acme: TenantFixture, acme_api: ApiClient) -> None:
    imported(acme_api, {"routes": [route_entry("existing", sources=[RULES])]})
    before = stored(acme.schema, "existing")
    document = {
        "defaults": {"plugins": context_plugin(injection={"mode": "system_prompt"})},
        "recipes": [{"name": "r", "plugins": context_plugin(sources=[HOUSE])}],
        "routes": [
            route_entry("fresh", sources=[RULES]),
            route_entry("existing", sources=[HISTORY]),
            route_entry("broken", sources=[RULES, {"type": "user_profile", "priority": -5}]),
        ],
    }
    error = error_of(import_yaml(acme_api, document))
    assert error["code"] == "invalid_request"
    assert error["param"] == "routes[2].plugins[0].configuration.sources[1].priority"
    assert error["message"].startswith("routes[2].plugins[0].configuration.sources[1].priority: ")
    with schema_context(acme.schema):
        assert not Route.objects.filter(name__in=["fresh", "broken"]).exists()
        assert not Recipe.objects.exists()
        assert not TenantDefaults.objects.exists()
    assert stored(acme.schema, "existing") == before


@pytest.mark.parametrize(
    ("document", "param", "words"),
    [
        (
            {"routes": [{"name": "x", "model": {"context_window": "big"}}]},
            "routes[0].model.context_window",
            "",
        ),
        (
            {"routes": [{"name": "x", "recipe": "missing"}]},
            "routes[0].recipe",
            "no recipe named 'missing'",
        ),
        ({"routes": [{"name": "x"}, {"name": "x"}]}, "routes[1].name", "appears twice"),
        ({"routes": [{"description": "no name"}]}, "routes[0].name", "needs a name"),
        ({"routes": [{"name": "x", "context": {}}]}, "routes[0].context", "unknown field"),
        (
            {"routes": [{"name": "x", "plugins": [{"type": "cache"}]}]},
            "routes[0].plugins[0].type",
            "unknown plugin type",
        ),
        (
            {"routes": [{"name": "x", "plugins": context_plugin() * 2}]},
            "routes[0].plugins[1]",
            "a second context plugin",
        ),
        (
            {"routes": [{"name": "x", "plugins": context_plugin(injection={"mode": "inline"})}]},
            "routes[0].plugins[0].configuration.injection.mode",
            "",
        ),
        (
            {"recipes": [{"name": "r", "plugins": context_plugin(budget={"max_tokens": 0})}]},
            "recipes[0].plugins[0].configuration.budget",
            "max_tokens",
        ),
        (
            {"defaults": {"plugins": context_plugin(sources=[{"type": "nope"}])}},
            "defaults.plugins[0].configuration.sources[0].type",
            "unknown source type",
        ),
        ({"routez": []}, "routez", "unknown field"),
    ],
)
def test_import_errors_name_the_path(
    acme_api: ApiClient, document: Any, param: str, words: str
) -> None:
    error = error_of(import_yaml(acme_api, document))
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ") and words in error["message"]


def test_malformed_bodies(acme_api: ApiClient) -> None:
    nothing = error_of(import_yaml(acme_api, "{}"))
    assert nothing["param"] is None and "write routes, recipes or defaults" in nothing["message"]
    assert "not valid YAML" in error_of(import_yaml(acme_api, "routes: [\n  - {name: a"))["message"]
    assert "empty" in error_of(import_yaml(acme_api, "   "))["message"]
    assert "expected an object" in error_of(import_yaml(acme_api, "- a\n- b\n"))["message"]
    assert "not text" in error_of(import_yaml(acme_api, "routes:\n- name: a\n  1: x\n"))["message"]
    dated = error_of(import_yaml(acme_api, "routes:\n- name: a\n  description: 2026-01-01\n"))
    assert dated["param"] == "routes[0].description" and "quote it" in dated["message"]
    # Aliases may not expand into a huge document (the "billion laughs").
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
    assert "split the document" in error_of(import_yaml(acme_api, bomb))["message"]


def test_changed_layers_must_keep_the_routes_left_out_valid(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    imported(
        acme_api,
        {
            "routes": [
                route_entry(
                    "tight", compress={"targets": {"tool_outputs": {"target_tokens": 1500}}}
                )
            ]
        },
    )
    lowered = context_plugin(compress={"targets": {"tool_outputs": {"min_tokens": 1000}}})
    error = error_of(import_yaml(acme_api, {"defaults": {"plugins": lowered}}))
    assert error["param"] == "defaults.plugins[0].configuration"
    assert "route 'tight', not in this document" in error["message"]
    assert "target_tokens must be lower than min_tokens" in error["message"]
    with schema_context(acme.schema):
        assert not TenantDefaults.objects.exists()
    # With the route in the document (fixed), the same defaults import.
    fixed = route_entry("tight", compress={"targets": {"tool_outputs": {"target_tokens": 500}}})
    assert imported(acme_api, {"defaults": {"plugins": lowered}, "routes": [fixed]})["updated"] == 1


# --- legacy configuration ---------------------------------------------------------------------


HINT = "run python manage.py migrate_config FILE"


@pytest.mark.parametrize(
    ("plugin", "words"),
    [
        (
            {"type": "rag", "configuration": {"enabled": True, "backend": "milvus", "top_k": 5}},
            "the 'rag' plugin is now a source of the context plugin",
        ),
        (
            {"type": "memory", "configuration": {"enabled": True, "auto_store": True}},
            "the 'memory' plugin is now a source of the context plugin",
        ),
        (
            {"type": "context_compression", "configuration": {"enabled": True, "mode": "auto"}},
            "the 'context_compression' plugin is now the compress and budget",
        ),
    ],
)
def test_legacy_plugins_are_refused_with_a_one_line_hint(
    acme_api: ApiClient, plugin: dict[str, Any], words: str
) -> None:
    document = {"routes": [{"name": "old", "plugins": [*context_plugin(sources=[RULES]), plugin]}]}
    error = error_of(import_yaml(acme_api, document))
    assert error["param"] == "routes[0].plugins[1]"
    assert error["message"] == f"routes[0].plugins[1]: {words}{error['message'].split(words)[1]}"
    assert error["message"].endswith(f"; {HINT}")
    assert acme_api.get("/api/v1/routes/old").status_code == 404


@pytest.mark.parametrize(
    ("document", "param"),
    [
        (
            {"prompt_compression": {"enabled": True, "max_tokens": 512}, "routes": []},
            "prompt_compression",
        ),
        # global.plugins and decisions import as vLLM Semantic Router writes them
        # (tests/routes/configuration/test_seed_imports.py).
        (
            {
                "routes": [
                    {
                        "name": "x",
                        "plugins": context_plugin(
                            sources=[
                                {
                                    "type": "rag",
                                    "backend_config": {"collection": "docs"},
                                    "top_k": 5,
                                }
                            ]
                        ),
                    }
                ]
            },
            "routes[0].plugins[0].configuration.sources[0].top_k",
        ),
        (
            {
                "routes": [
                    {
                        "name": "x",
                        "plugins": context_plugin(sources=[{"type": "memory", "auto_store": True}]),
                    }
                ]
            },
            "routes[0].plugins[0].configuration.sources[0].auto_store",
        ),
        (
            {"routes": [{"name": "x", "plugins": context_plugin(budget={"target_tokens": 9000})}]},
            "routes[0].plugins[0].configuration.budget.target_tokens",
        ),
        (
            {
                "routes": [
                    {
                        "name": "x",
                        "plugins": context_plugin(compress={"scoring": {"method": "bm25"}}),
                    }
                ]
            },
            "routes[0].plugins[0].configuration.compress.scoring",
        ),
        (
            {"routes": [{"name": "x", "plugins": context_plugin(targets={})}]},
            "routes[0].plugins[0].configuration.targets",
        ),
    ],
)
def test_removed_fields_are_refused_with_the_hint(
    acme_api: ApiClient, document: Any, param: str
) -> None:
    error = error_of(import_yaml(acme_api, document))
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ") and error["message"].endswith(f"; {HINT}")


LEGACY_FILE = """
prompt_compression:
  enabled: true
  profile: Multi-Turn
  max_tokens: 2048
routes:
- name: legacy
  description: Support, the old way
  model: {context_window: 64000, max_output_tokens: 1024}
  plugins:
  - type: rag
    configuration:
      enabled: true
      backend: milvus
      backend_config: {collection: docs, reuse_cache_connection: true}
      top_k: 8
      similarity_threshold: 0.55
      rerank: {enabled: true, top_k: 3}
      injection_mode: system_prompt
      on_failure: warn
      min_confidence_threshold: 0.4
  - type: memory
    configuration:
      enabled: true
      retrieval_limit: 4
      similarity_threshold: 0.65
      auto_store: true
  - type: context_compression
    configuration:
      enabled: true
      budget: {trigger_tokens: 20000, target_tokens: 12000, reserve_output_tokens: 0}
      targets:
        tool_outputs: {mode: extractive, min_tokens: 3000, target_tokens: 1200}
      scoring: {method: bm25}
      failure_mode: fail_closed
"""


def test_migrate_config_rewrites_a_legacy_file_that_then_imports(
    tmp_path: Path, acme: TenantFixture, acme_api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(LEGACY_FILE)
    assert error_of(import_yaml(acme_api, LEGACY_FILE))["message"].endswith(HINT)

    out = tmp_path / "migrated.yaml"
    call_command("migrate_config", str(legacy), "--output", str(out))
    notes = capsys.readouterr().err
    assert "min_confidence_threshold" in notes and "trigger_tokens" in notes
    document = yaml.safe_load(out.read_text())
    assert document["defaults"] == {
        "plugins": context_plugin(
            compress={"signals": {"enabled": True, "profile": "Multi-Turn", "max_tokens": 2048}}
        )
    }
    route = document["routes"][0]
    assert route["name"] == "legacy" and route["model"]["context_window"] == 64000
    assert len(route["plugins"]) == 1 and route["plugins"][0]["type"] == "context"
    configuration = route["plugins"][0]["configuration"]
    rag, memory = configuration["sources"]
    assert rag == {
        "type": "rag",
        "enabled": True,
        "on_failure": "warn",
        # The platform has a milvus backend: the collection is read from Milvus, as it was.
        "backend": "milvus",
        "backend_config": {"collection": "docs", "reuse_cache_connection": True},
        "match": {
            "recall": {"method": "embedding", "top_k": 8, "min_similarity": 0.55},
            "judge": {"preset": "relevance", "top_k": 3},
        },
    }
    assert memory == {
        "type": "memory",
        "enabled": True,
        "match": {"recall": {"method": "embedding", "top_k": 4, "min_similarity": 0.65}},
        "store": {"auto": True},
    }
    assert configuration["compress"] == {
        "mode": "auto",
        "failure_mode": "fail_closed",
        "targets": {
            "tool_outputs": {"mode": "extractive", "min_tokens": 3000, "target_tokens": 1200}
        },
        "match": {"recall": {"method": "bm25"}},
    }
    assert configuration["budget"] == {"max_tokens": 12000, "reserve_output_tokens": "auto"}
    assert configuration["injection"] == {"mode": "system_prompt"}

    # Printed when there is no --output, as JSON on request; a second run changes nothing.
    call_command("migrate_config", str(out), "--format", "json")
    assert json.loads(capsys.readouterr().out) == document

    result = imported(acme_api, out.read_text())
    assert result == {
        "imported": ["legacy"],
        "created": 1,
        "updated": 0,
        "recipes": [],
        "defaults": True,
    }
    effective = acme_api.get("/api/v1/routes/legacy").json()["effective_context"]
    assert effective["compress"]["signals"]["profile"] == "multi_turn"
    assert effective["compress"]["mode"] == "auto"
    assert [s["type"] for s in effective["sources"]] == ["rag", "memory"]


def test_migrate_config_folds_a_global_memory_store_into_the_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = tmp_path / "legacy.json"
    legacy.write_text(
        json.dumps(
            {
                "global": {
                    "stores": {
                        "memory": {
                            "enabled": True,
                            "backend": "milvus",
                            "default_retrieval_limit": 7,
                            "auto_store": True,
                        }
                    },
                    "plugins": [
                        {"type": "context_compression", "configuration": {"enabled": True}}
                    ],
                },
                "decisions": [
                    {
                        "name": "docs",
                        "rules": {"operator": "AND"},
                        "plugins": [
                            {
                                "type": "rag",
                                "configuration": {
                                    "backend": "vectorstore",
                                    "backend_config": {"vector_store_id": "kb"},
                                },
                            }
                        ],
                    },
                    {"name": "plain"},
                ],
            }
        )
    )
    call_command("migrate_config", str(legacy))
    captured = capsys.readouterr()
    document = yaml.safe_load(captured.out)
    # The store's limit stays the store's; its unwritten threshold is the embedder's default.
    memory = {"type": "memory", "store": {"default_retrieval_limit": 7, "auto": True}}
    defaults = document["defaults"]["plugins"][0]["configuration"]
    assert defaults["sources"] == [memory]
    assert defaults["compress"] == {"mode": "auto"}
    docs, plain = document["routes"]
    assert [s["type"] for s in docs["plugins"][0]["configuration"]["sources"]] == ["rag", "memory"]
    assert docs["plugins"][0]["configuration"]["sources"][0]["backend_config"] == {
        "collection": "kb"
    }
    assert plain == {"name": "plain"}  # writes no sources: inherits the defaults' memory
    assert "decisions[0].rules" in captured.err


def test_migrate_config_reports_unreadable_files(tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="cannot read"):
        call_command("migrate_config", str(tmp_path / "missing.yaml"))
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(CommandError, match="expected a mapping"):
        call_command("migrate_config", str(listed))


# --- layering changes what resolve does -------------------------------------------------------


def test_a_route_inherits_compress_from_the_tenant_defaults(acme_api: ApiClient) -> None:
    imported(acme_api, {"routes": [{"name": "logs", "model": {"context_window": 16_000}}]})
    refused = resolve(acme_api, "logs", conversation())
    assert error_of(refused)["code"] == "context_length_exceeded"

    imported(acme_api, {"defaults": {"plugins": context_plugin(compress={"mode": "auto"})}})
    report = resolved(acme_api, "logs", conversation())  # the route itself is unchanged
    assert report["compression"]["applied"] is True
    assert report["compression"]["tokens_after"] < report["compression"]["tokens_before"]
    route = acme_api.get("/api/v1/routes/logs").json()
    assert route["context"] == {} and route["effective_context"]["compress"]["mode"] == "auto"

    # A route that writes compress: null drops the inherited compression again.
    imported(
        acme_api,
        {
            "routes": [
                {
                    "name": "logs",
                    "model": {"context_window": 16_000},
                    "plugins": context_plugin(compress=None),
                }
            ]
        },
    )
    assert error_of(resolve(acme_api, "logs", conversation()))["code"] == "context_length_exceeded"


def test_sources_a_route_writes_replace_the_inherited_ones(acme_api: ApiClient) -> None:
    imported(
        acme_api,
        {
            "defaults": {
                "plugins": context_plugin(sources=[RULES], budget={"context_tokens": 500})
            },
            "routes": [
                {"name": "inherits"},
                {"name": "own", "plugins": context_plugin(sources=[HOUSE])},
            ],
        },
    )
    assert source_names(resolved(acme_api, "inherits")) == ["rules"]
    own = resolved(acme_api, "own")
    assert source_names(own) == ["house"]  # replaced, not merged with "rules"
    assert own["budget"]["context"] == 500  # the other fields are still inherited


def test_a_recipe_sits_between_the_defaults_and_the_route(acme_api: ApiClient) -> None:
    imported(
        acme_api,
        {
            "defaults": {
                "plugins": context_plugin(sources=[RULES], budget={"context_tokens": 500})
            },
            "recipes": [
                {
                    "name": "strict",
                    "plugins": context_plugin(sources=[HOUSE], injection={"mode": "system_prompt"}),
                }
            ],
            "routes": [
                {"name": "plain"},
                {"name": "strict-route", "recipe": "strict"},
                {
                    "name": "strict-tool",
                    "recipe": "strict",
                    "plugins": context_plugin(
                        injection={"mode": "tool_role"}, budget={"context_tokens": 300}
                    ),
                },
            ],
        },
    )
    plain = resolved(acme_api, "plain")
    assert source_names(plain) == ["rules"] and plain["request"]["messages"][0]["role"] != "system"

    strict = resolved(acme_api, "strict-route")
    assert source_names(strict) == ["house"]
    system = strict["request"]["messages"][0]
    assert system["role"] == "system" and "Never promise refunds." in system["content"]
    assert strict["budget"]["context"] == 500  # from the defaults, under the recipe

    tool = resolved(acme_api, "strict-tool")
    assert source_names(tool) == ["house"]  # the recipe's sources
    assert tool["request"]["messages"][0]["role"] != "system"  # the route's injection wins
    assert tool["budget"]["context"] == 300

    # Changing the recipe changes every route on it, at the next resolve.
    imported(
        acme_api,
        {"recipes": [{"name": "strict", "plugins": context_plugin(sources=[HISTORY, HOUSE])}]},
    )
    assert source_names(resolved(acme_api, "strict-route")) == ["recent_messages", "house"]
    assert resolved(acme_api, "strict-route")["request"]["messages"][0]["role"] != "system"


def reads(captured: CaptureQueriesContext) -> list[str]:
    """The queries of a capture that read tables (not the ``SET search_path`` of the schema)."""
    return [query["sql"] for query in captured if not query["sql"].startswith("SET ")]


def test_resolve_reads_the_route_and_the_layers_beneath_it_in_one_query(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    imported(
        acme_api,
        {
            "defaults": {"plugins": context_plugin(budget={"context_tokens": 500})},
            "recipes": [{"name": "strict", "plugins": context_plugin(sources=[HOUSE])}],
            "routes": [{"name": "strict-route", "recipe": "strict"}],
        },
    )
    with schema_context(acme.schema):
        with CaptureQueriesContext(connection) as captured:
            route = route_by_name("strict-route")
            assert route is not None
            spec = route.spec()
        assert len(reads(captured)) == 1, reads(captured)
        assert [source.name for source in spec.context.sources] == ["house"]
        assert spec.context.budget.context_tokens == 500
        # Without the defaults row the route still reads in one query, and inherits nothing.
        TenantDefaults.objects.all().delete()
        with CaptureQueriesContext(connection) as captured:
            route = route_by_name("strict-route")
            assert route is not None
            spec = route.spec()
        assert len(reads(captured)) == 1, reads(captured)
        assert spec.context.budget.context_tokens is None


def test_signals_come_from_the_defaults_or_a_recipe_never_a_route(acme_api: ApiClient) -> None:
    signals = {"enabled": True, "profile": "coding", "max_tokens": 256}
    refused = error_of(
        import_yaml(
            acme_api,
            {
                "routes": [
                    {"name": "talky", "plugins": context_plugin(compress={"signals": signals})}
                ]
            },
        )
    )
    assert refused["param"] == "routes[0].plugins[0].configuration.compress.signals"
    assert "tenant defaults or a recipe" in refused["message"]
    assert acme_api.get("/api/v1/routes/talky").status_code == 404

    imported(
        acme_api,
        {
            "defaults": {"plugins": context_plugin(compress={"signals": signals})},
            "recipes": [
                {
                    "name": "quiet",
                    "plugins": context_plugin(compress={"signals": {"enabled": False}}),
                }
            ],
            "routes": [
                {"name": "talky", "plugins": context_plugin(compress={"mode": "auto"})},
                {"name": "hushed", "recipe": "quiet"},
            ],
        },
    )
    talky = acme_api.get("/api/v1/routes/talky").json()["effective_context"]["compress"]
    assert talky["signals"]["profile"] == "coding" and talky["mode"] == "auto"
    hushed = acme_api.get("/api/v1/routes/hushed").json()["effective_context"]["compress"]
    assert hushed["signals"]["enabled"] is False and hushed["signals"]["profile"] == "coding"


def test_the_crud_api_writes_the_routes_own_layer(acme_api: ApiClient) -> None:
    imported(
        acme_api,
        {
            "defaults": {"plugins": context_plugin(injection={"mode": "system_prompt"})},
            "recipes": [{"name": "r", "plugins": context_plugin(sources=[HOUSE])}],
        },
    )
    created = acme_api.post(
        "/api/v1/routes",
        {"name": "crud", "recipe": "r", "context": {"budget": {"context_tokens": 700}}},
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["recipe"] == "r"
    assert body["context"] == {"budget": {"context_tokens": 700}}
    assert body["effective_context"]["injection"]["mode"] == "system_prompt"
    assert [s["name"] for s in body["effective_context"]["sources"]] == ["house"]
    assert body["effective_context"]["budget"]["context_tokens"] == 700

    patched = acme_api.patch(
        "/api/v1/routes/crud", {"recipe": None, "context": {"injection": {"mode": "tool_role"}}}
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["recipe"] is None
    assert patched.json()["context"] == {
        "budget": {"context_tokens": 700},
        "injection": {"mode": "tool_role"},
    }
    assert patched.json()["effective_context"]["sources"] == []

    missing = acme_api.put("/api/v1/routes/crud", {"recipe": "nope"})
    assert error_of(missing)["param"] == "recipe"


# --- tenants and scopes -----------------------------------------------------------------------


def test_an_import_stays_in_its_tenant(
    acme: TenantFixture, globex: TenantFixture, acme_api: ApiClient, globex_api: ApiClient
) -> None:
    imported(globex_api, {"routes": [{"name": "shared-name"}]})
    imported(
        acme_api,
        {
            "defaults": {"plugins": context_plugin(sources=[RULES])},
            "recipes": [
                {"name": "r", "plugins": context_plugin(injection={"mode": "system_prompt"})}
            ],
            "routes": [{"name": "support", "recipe": "r"}, {"name": "shared-name"}],
        },
    )
    assert globex_api.get("/api/v1/routes/support").status_code == 404
    assert globex_api.get("/api/v1/routes/support/export").status_code == 404
    assert resolve(globex_api, "support").status_code == 404
    # globex's route of the same name does not take acme's defaults.
    assert source_names(resolved(globex_api, "shared-name")) == []
    assert source_names(resolved(acme_api, "shared-name")) == ["rules"]
    with schema_context(globex.schema):
        assert not Recipe.objects.exists() and not TenantDefaults.objects.exists()
    # A globex route cannot name acme's recipe.
    error = error_of(import_yaml(globex_api, {"routes": [{"name": "x", "recipe": "r"}]}))
    assert error["param"] == "routes[0].recipe"


def test_scopes(acme: TenantFixture, acme_api: ApiClient, anonymous_api: ApiClient) -> None:
    imported(acme_api, {"routes": [{"name": "support"}]})
    document = {"routes": [{"name": "other"}]}
    reader = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes="routes.read", name="reader").plain_key
    )
    writer = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes="routes.write", name="writer").plain_key
    )
    resolver = ApiClient(
        issue_api_key(tenant=acme.tenant, scopes="resolve", name="resolver").plain_key
    )

    assert reader.get("/api/v1/routes/support/export").status_code == 200
    assert error_of(import_yaml(reader, document), 403)["code"] == "forbidden"
    assert imported(writer, document)["created"] == 1
    assert error_of(writer.get("/api/v1/routes/support/export"), 403)["code"] == "forbidden"
    assert import_yaml(resolver, document).status_code == 403
    assert resolver.get("/api/v1/routes/support/export").status_code == 403
    assert error_of(import_yaml(anonymous_api, document), 401)["code"] == "unauthorized"
    assert anonymous_api.get("/api/v1/routes/support/export").status_code == 401


def test_a_route_named_import_is_still_a_route(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", {"name": "import"}).status_code == 201
    assert acme_api.get("/api/v1/routes/import").json()["name"] == "import"
    assert (
        acme_api.patch("/api/v1/routes/import", {"description": "x"}).json()["description"] == "x"
    )
    assert acme_api.get("/api/v1/routes/import/export").status_code == 200
    assert acme_api.delete("/api/v1/routes/import").status_code == 204


def test_the_schema_describes_import_and_export(anonymous_api: ApiClient) -> None:
    paths = anonymous_api.get("/api/schema/", {"format": "json"}).json()["paths"]
    assert "post" in paths["/api/v1/routes/import"]
    assert set(paths["/api/v1/routes/import"]) == {"post"}
    assert "get" in paths["/api/v1/routes/{name}/export"]
