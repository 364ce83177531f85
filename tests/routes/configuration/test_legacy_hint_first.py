"""A legacy ``rag``, ``memory`` or ``context_compression`` plugin pasted as it is gets the one-line
``migrate_config`` hint before any other question about its layer: before a fragment is asked
which layer it imports onto, before a decision's route is asked for its model, before an unknown
key is named. In every form a file carries one: a bare ``plugin:`` or ``plugins:`` fragment, a
decision's ``plugins`` (``decisions``, ``routing.decisions``, a recipe's), ``global.plugins``;
and pasted into the route API's body."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import ApiClient

IMPORT = "/api/v1/routes/import"
HINT = "run python manage.py migrate_config FILE"
WORDS = {
    "rag": "the 'rag' plugin is now a source of the context plugin",
    "memory": "the 'memory' plugin is now a source of the context plugin",
    "context_compression": (
        "the 'context_compression' plugin is now the compress and budget of the context plugin"
    ),
}
CONFIGURATIONS = {
    "rag": {"enabled": True, "backend": "milvus", "top_k": 5, "similarity_threshold": 0.78},
    "memory": {"enabled": True, "retrieval_limit": 5, "auto_store": True},
    "context_compression": {"enabled": True, "mode": "auto", "budget": {"target_tokens": "auto"}},
}
CONTEXT = {"type": "context", "configuration": {"sources": []}}


def legacy(kind: str) -> dict[str, Any]:
    return {"type": kind, "configuration": CONFIGURATIONS[kind]}


def documents(kind: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """(form, document, query, the legacy plugin's path): each with another fault the import would
    otherwise name first."""
    plugin = legacy(kind)
    return [
        # No layer named (?route=...): "a plugin fragment names no layer" otherwise.
        ("bare plugin", {"plugin": plugin}, "", "plugin"),
        ("bare plugins", {"plugins": [CONTEXT, plugin]}, "", "plugins[1]"),
        # A key a fragment must not hold.
        ("fragment with a stray key", {"plugins": [plugin], "note": 1}, "?route=r", "plugins[0]"),
        # A decision without a name and with a new route that has no model.
        ("decision", {"decisions": [{"plugins": [plugin]}]}, "", "decisions[0].plugins[0]"),
        (
            "routing decision",
            {"routing": {"decisions": [{"name": "new", "plugins": [CONTEXT, plugin]}]}},
            "",
            "routing.decisions[0].plugins[1]",
        ),
        (
            "recipe decision",
            {"recipes": [{"name": "Bad Name!", "decisions": [{"plugins": [plugin]}]}]},
            "",
            "recipes[0].decisions[0].plugins[0]",
        ),
        # global.plugins beside the platform's own defaults (written twice otherwise).
        (
            "global plugins",
            {"global": {"plugins": [plugin]}, "defaults": {"plugins": []}},
            "",
            "global.plugins[0]",
        ),
        # The platform's form, with an unknown key on the route.
        (
            "platform route",
            {"routes": [{"name": "x", "colour": "red", "plugins": [plugin]}]},
            "",
            "routes[0].plugins[0]",
        ),
        # And a layer named for a document that names its own.
        (
            "platform defaults",
            {"defaults": {"plugins": [plugin]}},
            "?route=r",
            "defaults.plugins[0]",
        ),
    ]


CASES = [
    pytest.param(kind, *case, id=f"{kind}-{case[0]}") for kind in WORDS for case in documents(kind)
]


@pytest.mark.parametrize(("kind", "form", "document", "query", "param"), CASES)
def test_a_pasted_legacy_plugin_gets_the_hint_first(
    acme_api: ApiClient, kind: str, form: str, document: dict[str, Any], query: str, param: str
) -> None:
    for content_type, raw in (
        ("application/yaml", yaml.safe_dump(document)),
        ("application/json", None),
    ):
        response = acme_api.send(
            "POST",
            IMPORT + query,
            document if raw is None else None,
            raw=raw,
            content_type=content_type,
        )
        assert response.status_code == 400, (form, response.content)
        error = response.json()["error"]
        assert error["param"] == param, (form, error)
        assert error["message"] == f"{param}: {WORDS[kind]}; {HINT}", (form, error)
    assert acme_api.get("/api/v1/routes").json()["data"] == []


@pytest.mark.parametrize("kind", list(WORDS))
def test_the_route_api_gives_the_hint_for_a_pasted_plugin_list(
    acme_api: ApiClient, kind: str
) -> None:
    existing = acme_api.post("/api/v1/routes", {"name": "kept", "context": {"sources": []}})
    assert existing.status_code == 201, existing.content
    body = {"name": "pasted", "model": {}, "plugins": [CONTEXT, legacy(kind)], "colour": "red"}
    for method, path in (("POST", "/api/v1/routes"), ("PUT", "/api/v1/routes/kept")):
        body["name"] = path.rsplit("/", 1)[1] if method == "PUT" else "pasted"
        response = acme_api.send(method, path, body)
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error == {
            "code": "invalid_request",
            "message": f"plugins[1]: {WORDS[kind]}; {HINT}",
            "param": "plugins[1]",
        }
    single = acme_api.post("/api/v1/routes", {"name": "pasted", "plugin": legacy(kind)})
    assert single.json()["error"]["message"] == f"plugin: {WORDS[kind]}; {HINT}"
