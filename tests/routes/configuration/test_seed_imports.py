"""Seed configurations imported as they are (``POST /api/v1/routes/import``): vLLM Semantic
Router's own examples from its context plugin's page, and its file shapes (``plugin:`` and
``plugins:`` fragments, ``global.plugins``, recipes with decisions), mapped onto the tenant
defaults, recipes and routes; legacy fragments refused with the hint, and ``migrate_config``
rewriting them into what imports.

The seed's examples are literal copies of the YAML it writes (its comments included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.conftest import ApiClient

IMPORT = "/api/v1/routes/import"
HINT = "run python manage.py migrate_config FILE"

# --- the seed's own examples (vLLM Semantic Router, "Context", Configuration) --------------------

SEED_PLUGINS = """\
plugins:
- type: context
  configuration:
    enabled: true
    sources: # retrieved in order, at most one of each type
    - type: rag
      backend: milvus
      backend_config: {collection: docs, reuse_cache_connection: true}
      match: # the default, written out
        recall: {method: embedding, top_k: 20, min_similarity: 0.3}
        judge: {preset: relevance, top_k: 6, min_score: 0.5}
      max_context_length: 10000 # characters
      on_failure: skip # skip | warn | block
    - type: memory
      store: {auto: true} # write the turn after the response
    compress:
      mode: auto # auto | always
      targets:
        tool_outputs: {mode: extractive, min_tokens: 2000, target_tokens: 1000}
      failure_mode: fail_open # fail_open | fail_closed
    budget:
      max_tokens: auto # or a number of input tokens
      reserve_output_tokens: auto
    injection:
      mode: tool_role # tool_role | system_prompt
"""

SEED_GLOBAL_SIGNALS = """\
global:
  plugins:
  - type: context
    configuration:
      enabled: true
      compress:
        signals:
          enabled: true
          max_tokens: 4096 # text over it is compressed down to it
          min_length: 512 # characters; text this long or shorter is kept whole
          profile: default # default | coding | medical | security | multi_turn
          skip_signals: [jailbreak, pii]
"""

# --- vLLM Semantic Router's own fragments (config/fragments/plugin/...), legacy plugins ----------

VSR_RAG_MILVUS = """\
plugin:
  type: rag
  configuration:
    enabled: true
    backend: milvus
    top_k: 5
    similarity_threshold: 0.78
    injection_mode: tool_role
    on_failure: warn
    backend_config:
      collection: docs
      reuse_cache_connection: true
      content_field: content
      metadata_field: metadata
"""

VSR_MEMORY = """\
plugin:
  type: memory
  configuration:
    enabled: true
    retrieval_limit: 5
    # Inherit the embedding-model-calibrated global threshold.
    auto_store: true
"""

VSR_COMPRESSION = """\
plugin:
  type: context_compression
  configuration:
    enabled: true
    mode: auto
    budget:
      trigger_tokens: auto
      target_tokens: auto
      reserve_output_tokens: auto
    targets:
      tool_outputs:
        mode: extractive
        min_tokens: 2000
        target_tokens: 1000
      history:
        mode: preserve
      rag:
        mode: preserve
      memory:
        mode: preserve
    scoring:
      method: bm25
    recovery:
      enabled: false
      ttl_seconds: 900
      max_bytes_per_request: 10485760
      max_total_bytes: 268435456
      max_retrievals: 8
    request_controls:
      enabled: false
      header: x-vsr-compression-control
      allowed: [bypass, target]
      max_target_tokens: 16000
    failure_mode: fail_open
"""

# A whole file in vLLM Semantic Router's canonical shape, with what this platform has no use for.
VSR_FILE = """\
version: v0.3
listeners:
- {name: http-8888, address: 0.0.0.0, port: 8888}
providers:
  models:
  - name: qwen3
    backend_refs: [{endpoint: "http://vllm:8000"}]
global:
  router: {strategy: priority}
  stores:
    memory:
      enabled: true
      backend: milvus
      default_retrieval_limit: 7
      default_similarity_threshold: 0.6
      auto_store: true
  plugins:
  - type: context
    configuration:
      compress:
        signals: {enabled: true, profile: coding}
routing:
  signals:
    keywords:
    - {name: billing_words, operator: OR, keywords: [refund, invoice]}
  decisions:
  - name: billing
    description: Billing questions
    priority: 100
    rules:
      operator: OR
      conditions: [{type: keyword, name: billing_words}]
    modelRefs: [{model: qwen3}]
    plugins:
    - type: router_replay
      configuration: {enabled: true}
    - type: context
      configuration:
        sources:
        - {type: skill_guardrails, name: house, texts: [Quote the refund policy.]}
        - {type: memory, name: memories}
recipes:
- name: strict
  plugins:
  - type: context
    configuration:
      injection: {mode: system_prompt}
  routing:
    decisions:
    - name: careful
      plugins:
      - type: context
        configuration:
          sources: [{type: skill_guardrails, name: rules, texts: [Check twice.]}]
"""


def import_text(api: ApiClient, text: str, query: str = "") -> Any:
    return api.post(IMPORT + query, raw=text, content_type="application/yaml")


def imported(api: ApiClient, text: str, query: str = "") -> dict[str, Any]:
    response = import_text(api, text, query)
    assert response.status_code == 200, response.content
    return response.json()


def error_of(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert "\n" not in error["message"]
    return error


def route(api: ApiClient, name: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/routes/{name}")
    assert response.status_code == 200, response.content
    return dict(response.json())


# --- the seed's examples ------------------------------------------------------------------------


def test_the_seeds_plugins_example_imports_onto_a_route(acme_api: ApiClient) -> None:
    result = imported(acme_api, SEED_PLUGINS, "?route=support")
    assert result["imported"] == ["support"] and result["created"] == 1
    own = route(acme_api, "support")["context"]
    assert own == yaml.safe_load(SEED_PLUGINS)["plugins"][0]["configuration"]
    rag, memory = route(acme_api, "support")["effective_context"]["sources"]
    assert rag["backend"] == "milvus"
    assert rag["backend_config"]["collection"] == "docs"
    assert rag["backend_config"]["reuse_cache_connection"] is True
    assert memory["type"] == "memory" and memory["store"]["auto"] is True


def test_a_fragment_onto_an_existing_route_keeps_what_the_fragment_cannot_say(
    acme_api: ApiClient,
) -> None:
    body = {
        "name": "support",
        "description": "Customer support",
        "model": {"name": "gpt-4o-mini", "context_window": 64_000, "max_output_tokens": 2048},
        "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be kind."]}]},
    }
    assert acme_api.post("/api/v1/routes", body).status_code == 201
    assert imported(acme_api, SEED_PLUGINS, "?route=support")["updated"] == 1
    after = route(acme_api, "support")
    assert after["model"] == {**body["model"], "upstream": None}
    assert after["description"] == "Customer support"
    assert [s["type"] for s in after["context"]["sources"]] == ["rag", "memory"]


def test_the_seeds_global_signals_example_imports_as_the_tenant_defaults(
    acme_api: ApiClient,
) -> None:
    assert imported(acme_api, SEED_GLOBAL_SIGNALS)["defaults"] is True
    assert imported(acme_api, "routes:\n- name: plain\n")["created"] == 1
    signals = route(acme_api, "plain")["effective_context"]["compress"]["signals"]
    assert signals["enabled"] is True and signals["profile"] == "default"
    assert signals["max_tokens"] == 4096 and signals["skip_signals"] == ["jailbreak", "pii"]


def test_the_seeds_plugin_under_recipes_decisions_imports_as_a_recipe_and_its_routes(
    acme_api: ApiClient,
) -> None:
    # "Add the plugin under recipes[].decisions[].plugins": the seed's example, placed there.
    indented = "\n".join("    " + line for line in SEED_PLUGINS.splitlines())
    text = f"recipes:\n- name: support-profile\n  decisions:\n  - name: support\n{indented}\n"
    result = imported(acme_api, text)
    assert result["recipes"] == ["support-profile"] and result["imported"] == ["support"]
    written = route(acme_api, "support")
    assert written["recipe"] == "support-profile"
    assert written["context"]["sources"][0]["backend"] == "milvus"


def test_fragments_need_a_layer_and_files_name_their_own(acme_api: ApiClient) -> None:
    missing = error_of(import_text(acme_api, SEED_PLUGINS))
    assert missing["param"] == "plugins" and "?route=NAME" in missing["message"]
    onto_file = error_of(import_text(acme_api, SEED_GLOBAL_SIGNALS, "?route=x"))
    assert onto_file["param"] == "route"
    both = error_of(import_text(acme_api, SEED_PLUGINS, "?route=a&recipe=b"))
    assert both["param"] == "recipe"
    assert imported(acme_api, SEED_PLUGINS, "?recipe=shared")["recipes"] == ["shared"]
    assert imported(acme_api, SEED_PLUGINS, "?defaults=true")["defaults"] is True
    bad_name = error_of(import_text(acme_api, SEED_PLUGINS, "?route=no%20spaces"))
    assert bad_name["param"] == "route"


# --- vLLM Semantic Router's file shapes -----------------------------------------------------------


def test_a_whole_vsr_file_maps_onto_defaults_recipes_and_routes(acme_api: ApiClient) -> None:
    result = imported(acme_api, VSR_FILE)
    assert result["defaults"] is True and result["recipes"] == ["strict"]
    assert sorted(result["imported"]) == ["billing", "careful"]
    notes = "\n".join(result["notes"])
    for ignored in (
        "version",
        "listeners",
        "providers",
        "global.router",
        "global.stores.memory",
        "routing.signals",
        "routing.decisions[0].priority",
        "routing.decisions[0].rules",
        "routing.decisions[0].modelRefs",
        "routing.decisions[0].plugins[0]: the 'router_replay' plugin",
    ):
        assert ignored in notes, ignored

    billing = route(acme_api, "billing")
    assert billing["description"] == "Billing questions" and billing["recipe"] is None
    guardrails, memory = billing["effective_context"]["sources"]
    assert guardrails["texts"] == ["Quote the refund policy."]
    # The store's defaults, kept as the store's: the source's match block would win over them,
    # and nothing unwritten is filled in (the embedder's defaults apply there).
    assert memory.get("match") is None
    assert memory["store"]["default_retrieval_limit"] == 7
    assert memory["store"]["default_similarity_threshold"] == 0.6
    assert memory["store"]["auto"] is True
    assert (
        billing["effective_context"]["compress"]["signals"]["profile"] == "coding"
    )  # global.plugins

    careful = route(acme_api, "careful")
    assert careful["recipe"] == "strict"
    assert (
        careful["effective_context"]["injection"]["mode"] == "system_prompt"
    )  # the recipe's plugins
    assert careful["effective_context"]["sources"][0]["texts"] == ["Check twice."]


def test_older_flat_files_with_top_level_decisions_import(acme_api: ApiClient) -> None:
    text = """\
keyword_rules:
- {name: urgent, operator: OR, keywords: [asap]}
decisions:
- name: urgent
  rules: {operator: AND, conditions: [{type: keyword, name: urgent}]}
  plugins:
  - type: context
    configuration:
      sources: [{type: skill_guardrails, texts: [Answer first.]}]
"""
    result = imported(acme_api, text)
    assert result["imported"] == ["urgent"]
    assert any(note.startswith("keyword_rules:") for note in result["notes"])


def test_errors_name_the_files_own_paths(acme_api: ApiClient) -> None:
    wrong = VSR_FILE.replace("texts: [Quote the refund policy.]}", "priority: 5000}")
    error = error_of(import_text(acme_api, wrong))
    param = "routing.decisions[0].plugins[1].configuration.sources[0].priority"
    assert error["param"] == param and error["message"].startswith(f"{param}: ")

    fragment = SEED_PLUGINS.replace("max_context_length: 10000", "max_context_length: 0")
    error = error_of(import_text(acme_api, fragment, "?route=support"))
    param = "plugins[0].configuration.sources[0].max_context_length"
    assert error["param"] == param and error["message"].startswith(f"{param}: ")
    assert acme_api.get("/api/v1/routes/support").status_code == 404  # nothing imported


# --- legacy fragments: the hint, and migrate_config ---------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "words"),
    [
        (VSR_RAG_MILVUS, "the 'rag' plugin is now a source of the context plugin"),
        (VSR_MEMORY, "the 'memory' plugin is now a source of the context plugin"),
        (
            VSR_COMPRESSION,
            "the 'context_compression' plugin is now the compress and budget of the context plugin",
        ),
    ],
    ids=["rag", "memory", "context_compression"],
)
def test_legacy_fragments_get_the_hint_and_migrate_config_rewrites_them(
    acme_api: ApiClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fragment: str,
    words: str,
) -> None:
    error = error_of(import_text(acme_api, fragment, "?route=legacy"))
    assert error["param"] == "plugin"
    assert error["message"] == f"plugin: {words}; {HINT}"

    legacy = tmp_path / "fragment.yaml"
    legacy.write_text(fragment)
    out = tmp_path / "migrated.yaml"
    call_command("migrate_config", str(legacy), "--output", str(out))
    migrated = yaml.safe_load(out.read_text())
    assert migrated["plugin"]["type"] == "context"
    assert imported(acme_api, out.read_text(), "?route=legacy")["created"] == 1
    sources = route(acme_api, "legacy")["context"].get("sources", [])
    if "rag" in words:
        (rag,) = sources
        assert rag["backend"] == "milvus"  # read from Milvus, as it was
        assert rag["backend_config"] == {
            "collection": "docs",
            "reuse_cache_connection": True,
            "content_field": "content",
            "metadata_field": "metadata",
        }
        recall = rag["match"]["recall"]
        assert (recall["method"], recall["top_k"], recall["min_similarity"]) == (
            "embedding",
            5,
            0.78,
        )
        assert rag["on_failure"] == "warn"
    elif "memory" in words:
        (memory,) = sources
        assert memory["store"]["auto"] is True and memory["match"]["recall"]["top_k"] == 5
    else:
        compress = route(acme_api, "legacy")["context"]["compress"]
        assert compress["match"]["recall"]["method"] == "bm25" and compress["mode"] == "auto"
        assert compress["targets"]["tool_outputs"]["min_tokens"] == 2000
    capsys.readouterr()


def test_migrate_config_leaves_the_seeds_example_as_it_is_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(SEED_PLUGINS)
    call_command("migrate_config", str(seed))
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out) == yaml.safe_load(SEED_PLUGINS)
    assert "nothing to rewrite" in captured.err


def test_migrate_config_fails_when_the_result_would_not_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(SEED_PLUGINS.replace("backend: milvus", "backend: cassandra"))
    out = tmp_path / "out.yaml"
    with pytest.raises(CommandError, match="will not import as it is") as raised:
        call_command("migrate_config", str(broken), "--output", str(out))
    assert "plugins[0].configuration.sources[0].backend" in str(raised.value)
    assert out.exists()  # written all the same, to be fixed by hand
