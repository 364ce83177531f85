"""Secret fields of source settings (milvus ``token``, qdrant ``api_key``, openai ``api_key``):
stored encrypted in the layer that writes them, shown as ``{"set": true}`` by the API, the export
and the admin, kept when that is written back (PUT, PATCH, import, the GET body posted again),
replaced by a new value, removed by null, never visible to another tenant, never in a replay
record or a log line; decrypted only when the backend is built for a fetch."""

from __future__ import annotations

import copy
import io
import json
import logging
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet
from django.core.management import call_command
from django_tenants.utils import schema_context

from contextplatform.core import secrets
from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from sources.secret_settings import SHOWN
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Service, json_reply, outbound_allowlist, running_service
from tests.sources.backends.conftest import backend_route, create, resolve_source

SECRET = "sk-test-0123456789abcdef"
OTHER = "sk-test-fedcba9876543210"

# backend, config (with the secret), the secret's key
BACKENDS = [
    ("milvus", {"collection": "docs", "uri": "kb.db"}, "token"),
    ("qdrant", {"collection": "docs", "url": "kb"}, "api_key"),
    ("openai", {"vector_store_id": "vs_abc123"}, "api_key"),
]


def stored_context(schema: str, name: str) -> dict[str, Any]:
    with schema_context(schema):
        return Route.objects.get(name=name).context


def stored_secret(context: dict[str, Any], key: str, index: int = 0) -> Any:
    return context["sources"][index]["backend_config"].get(key, "absent")


def decrypted(value: Any) -> str:
    assert isinstance(value, dict) and set(value) == {"encrypted"}, value
    return secrets.decrypt(value["encrypted"])


def shown(body: dict[str, Any], key: str, part: str = "context") -> Any:
    return body[part]["sources"][0]["backend_config"].get(key, "absent")


def written_back(body: dict[str, Any]) -> dict[str, Any]:
    """A GET body, to write back as it is (its read-only fields are ignored)."""
    return copy.deepcopy(body)


@pytest.fixture(params=BACKENDS, ids=[backend for backend, _, _ in BACKENDS])
def written(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], str]:
    backend, config, key = request.param
    return backend, {**config, key: SECRET}, key


def test_a_secret_is_stored_encrypted_and_shown_as_set(
    acme: TenantFixture, acme_api: ApiClient, written: tuple[str, dict[str, Any], str]
) -> None:
    backend, config, key = written
    created = create(acme_api, backend_route("r", backend, config))
    for part in ("context", "effective_context"):
        assert shown(created, key, part) == SHOWN
    body = acme_api.get("/api/v1/routes/r").json()
    assert shown(body, key) == SHOWN and shown(body, key, "effective_context") == SHOWN
    listed = json.dumps(acme_api.get("/api/v1/routes").json())
    assert SECRET not in json.dumps(body) and SECRET not in listed

    stored = stored_secret(stored_context(acme.schema, "r"), key)
    assert decrypted(stored) == SECRET
    assert SECRET not in json.dumps(stored)

    exported = acme_api.get("/api/v1/routes/r/export").content.decode()
    assert SECRET not in exported and stored["encrypted"] not in exported
    document = yaml.safe_load(exported)
    source = document["routes"][0]["plugins"][0]["configuration"]["sources"][0]
    assert source["backend_config"][key] == SHOWN


def test_the_get_body_posted_back_keeps_the_secret_and_a_new_one_replaces_it(
    acme: TenantFixture, acme_api: ApiClient, written: tuple[str, dict[str, Any], str]
) -> None:
    backend, config, key = written
    create(acme_api, backend_route("r", backend, config))
    before = stored_secret(stored_context(acme.schema, "r"), key)

    body = written_back(acme_api.get("/api/v1/routes/r").json())
    put = acme_api.put("/api/v1/routes/r", body)
    assert put.status_code == 200, put.content
    assert stored_secret(stored_context(acme.schema, "r"), key) == before  # the same token

    patched = acme_api.patch("/api/v1/routes/r", {"description": "changed"})
    assert patched.status_code == 200, patched.content
    assert stored_secret(stored_context(acme.schema, "r"), key) == before

    body["context"]["sources"][0]["backend_config"][key] = OTHER
    assert acme_api.put("/api/v1/routes/r", body).status_code == 200
    assert decrypted(stored_secret(stored_context(acme.schema, "r"), key)) == OTHER

    body["context"]["sources"][0]["backend_config"][key] = None
    assert acme_api.put("/api/v1/routes/r", body).status_code == 200
    assert stored_secret(stored_context(acme.schema, "r"), key) is None
    assert shown(acme_api.get("/api/v1/routes/r").json(), key) is None


def test_an_export_imported_back_keeps_the_secret(
    acme: TenantFixture, acme_api: ApiClient, written: tuple[str, dict[str, Any], str]
) -> None:
    backend, config, key = written
    create(acme_api, backend_route("r", backend, config))
    before = stored_secret(stored_context(acme.schema, "r"), key)
    exported = acme_api.get("/api/v1/routes/r/export").content
    imported = acme_api.post("/api/v1/routes/import", raw=exported, content_type="application/yaml")
    assert imported.status_code == 200, imported.content
    assert imported.json()["updated"] == 1
    assert stored_secret(stored_context(acme.schema, "r"), key) == before


def test_a_stored_token_cannot_be_written_back(
    acme: TenantFixture, acme_api: ApiClient, written: tuple[str, dict[str, Any], str]
) -> None:
    """Tokens never leave the platform; one written (copied from another tenant's rows, made up)
    is refused and changes nothing."""
    backend, config, key = written
    create(acme_api, backend_route("r", backend, config))
    before = stored_secret(stored_context(acme.schema, "r"), key)
    forged = {"encrypted": secrets.encrypt("someone else's key")}
    body = written_back(acme_api.get("/api/v1/routes/r").json())
    body["context"]["sources"][0]["backend_config"][key] = forged
    refused = acme_api.put("/api/v1/routes/r", body)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == f"context.sources[0].backend_config.{key}"
    assert "cannot be written back" in refused.json()["error"]["message"]
    assert stored_secret(stored_context(acme.schema, "r"), key) == before


def test_another_tenant_never_sees_a_secret_and_takes_a_get_body_without_it(
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    written: tuple[str, dict[str, Any], str],
) -> None:
    backend, config, key = written
    create(acme_api, backend_route("r", backend, config))
    assert globex_api.get("/api/v1/routes/r").status_code == 404
    assert globex_api.get("/api/v1/routes/r/export").status_code == 404
    assert "r" not in [route["name"] for route in globex_api.get("/api/v1/routes").json()["data"]]

    body = written_back(acme_api.get("/api/v1/routes/r").json())
    posted = globex_api.post("/api/v1/routes", body)  # a GET body, to another tenant: accepted
    assert posted.status_code == 201, posted.content
    assert shown(posted.json(), key) == "absent"  # without the secret it cannot see
    assert stored_secret(stored_context(globex.schema, "r"), key) == "absent"
    assert decrypted(stored_secret(stored_context(acme.schema, "r"), key)) == SECRET


def test_hybrid_parts_keep_their_own_secrets(acme: TenantFixture, acme_api: ApiClient) -> None:
    config = {
        "primary": {
            "backend": "milvus",
            "backend_config": {"collection": "docs", "uri": "kb.db", "token": SECRET},
        },
        "fallback": {
            "backend": "openai",
            "backend_config": {"vector_store_id": "vs_1", "api_key": OTHER},
        },
    }
    created = create(acme_api, backend_route("r", "hybrid", config))
    shown_config = created["context"]["sources"][0]["backend_config"]
    assert shown_config["primary"]["backend_config"]["token"] == SHOWN
    assert shown_config["fallback"]["backend_config"]["api_key"] == SHOWN
    stored = stored_context(acme.schema, "r")["sources"][0]["backend_config"]
    assert decrypted(stored["primary"]["backend_config"]["token"]) == SECRET
    assert decrypted(stored["fallback"]["backend_config"]["api_key"]) == OTHER
    assert acme_api.put("/api/v1/routes/r", written_back(created)).status_code == 200
    again = stored_context(acme.schema, "r")["sources"][0]["backend_config"]
    assert again == stored


def layer_document(key_value: Any) -> dict[str, Any]:
    source = {
        "type": "rag",
        "name": "kb",
        "backend": "openai",
        "backend_config": {"vector_store_id": "vs_1", "api_key": key_value},
    }
    return {
        "defaults": {"plugins": [{"type": "context", "configuration": {"sources": [source]}}]},
        "recipes": [
            {
                "name": "support",
                "plugins": [
                    {
                        "type": "context",
                        "configuration": {
                            "sources": [{**source, "backend_config": {**source["backend_config"]}}]
                        },
                    }
                ],
            }
        ],
        "routes": [{"name": "on-recipe", "recipe": "support"}],
    }


def test_recipes_and_tenant_defaults_seal_their_sources_secrets_too(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    imported = acme_api.post("/api/v1/routes/import", layer_document(SECRET))
    assert imported.status_code == 200, imported.content
    with schema_context(acme.schema):
        defaults = TenantDefaults.current_context()
        recipe = Recipe.objects.get(name="support").context
    assert decrypted(stored_secret(defaults, "api_key")) == SECRET
    assert decrypted(stored_secret(recipe, "api_key")) == SECRET

    body = acme_api.get("/api/v1/routes/on-recipe").json()
    assert (
        shown(body, "api_key", "effective_context") == SHOWN
    )  # the effective sources (the recipe's)
    assert SECRET not in json.dumps(body)
    exported = acme_api.get("/api/v1/routes/on-recipe/export").content.decode()
    assert SECRET not in exported
    recipe_source = yaml.safe_load(exported)["recipes"][0]["plugins"][0]["configuration"]
    assert recipe_source["sources"][0]["backend_config"]["api_key"] == SHOWN

    again = acme_api.post("/api/v1/routes/import", layer_document(SHOWN))  # keeps both
    assert again.status_code == 200, again.content
    with schema_context(acme.schema):
        assert TenantDefaults.current_context() == defaults
        assert Recipe.objects.get(name="support").context == recipe


def test_the_secret_reaches_the_service_and_no_record_or_log_line(
    acme: TenantFixture,
    acme_api: ApiClient,
    caplog: pytest.LogCaptureFixture,
    settings: Any,
) -> None:
    """Decrypted for the fetch only: the search service gets the key; the service answering
    401 with the key quoted leaves it in no report, replay record or log line."""
    settings.REPLAY_WRITES = "inline"
    with running_service() as service, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        config = {"vector_store_id": "vs_1", "api_key": SECRET, "base_url": service.url("/v1")}
        create(acme_api, backend_route("r", "openai", config, on_failure="warn"))
        service.responder = lambda seen: json_reply(
            {"error": {"message": f"Incorrect API key provided: {SECRET}"}}, 401
        )
        with caplog.at_level(logging.INFO):
            source = resolve_source(acme_api, "r")
        assert_key_sent(service)
    assert source["status"] == "failed" and "401" in source["error"]
    assert SECRET not in json.dumps(source)
    assert SECRET not in caplog.text
    with schema_context(acme.schema):
        records = [json.dumps(record.sources) for record in ReplayRecord.objects.all()]
    assert records and all(SECRET not in record for record in records)


def assert_key_sent(service: Service) -> None:
    assert service.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


def test_rotation_re_encrypts_the_sources_secrets_and_an_unreadable_one_fails_the_source(
    acme: TenantFixture, acme_api: ApiClient, settings: Any
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.DEPLOYMENT_SECRET_KEYS = old
    with running_service() as service, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        config = {"vector_store_id": "vs_1", "api_key": SECRET, "base_url": service.url("/v1")}
        create(acme_api, backend_route("r", "openai", config))
        before = stored_secret(stored_context(acme.schema, "r"), "api_key")

        settings.DEPLOYMENT_SECRET_KEYS = f"{new},{old}"
        output = io.StringIO()
        call_command("rotate_source_secrets", stdout=output)
        assert "acme: 1 source secret(s) re-encrypted" in output.getvalue()
        after = stored_secret(stored_context(acme.schema, "r"), "api_key")
        assert after != before

        settings.DEPLOYMENT_SECRET_KEYS = new
        assert decrypted(after) == SECRET
        service.answer({"object": "vector_store.search_results.page", "data": []})
        assert resolve_source(acme_api, "r")["status"] in ("ok", "empty")
        assert_key_sent(service)

        settings.DEPLOYMENT_SECRET_KEYS = old  # a key dropped too early
        failed = resolve_source(acme_api, "r")
        assert failed["status"] == "failed" and "cannot be decrypted" in failed["error"]
        assert (
            acme_api.get("/api/v1/routes/r").json()["context"]["sources"][0]["backend_config"][
                "api_key"
            ]
            == SHOWN
        )  # still shown as set, never as the token
