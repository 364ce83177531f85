"""Deployments through the API: CRUD, validation errors, the write-only encrypted key, key
rotation, and a route's ``model.upstream`` naming a deployment (the first version's inline
object migrated into one)."""

from __future__ import annotations

import importlib
import io
import logging
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django_tenants.utils import schema_context

from contextplatform.core import secrets
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import deployment_named, upstream_of
from contextplatform.routes.models import Route
from tests.conftest import ApiClient, TenantFixture

KEY = "sk-test-0123456789-very-secret"


def body(name: str = "gpt", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        "api_key": KEY,
        "timeout_ms": 30_000,
        "context_window": 128_000,
        "max_output_tokens": 4096,
        "headers": {"OpenAI-Organization": "org-1"},
        **fields,
    }


def stored(tenant: TenantFixture, name: str) -> Deployment:
    with schema_context(tenant.schema):
        return Deployment.objects.get(name=name)


def plain_key(tenant: TenantFixture, name: str) -> str | None:
    with schema_context(tenant.schema):
        return upstream_of(Deployment.objects.get(name=name)).api_key


def raw_rows(tenant: TenantFixture) -> str:
    """Every deployment row as the database holds it, as text."""
    with schema_context(tenant.schema), connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(d)::text FROM deployments_deployment d")
        return "\n".join(row[0] for row in cursor.fetchall())


# --- CRUD and the write-only key ---------------------------------------------------------------


def test_create_read_list_replace_patch_delete(
    acme_api: ApiClient, acme: TenantFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    created = acme_api.post("/api/v1/deployments", body())
    assert created.status_code == 201, created.content
    representation = created.json()
    assert representation["name"] == "gpt"
    assert representation["protocol"] == "openai"
    assert representation["model"] == "gpt-4o-mini"
    assert representation["headers_set"] == ["OpenAI-Organization"]
    assert "headers" not in representation
    assert representation["may_judge"] is True
    assert representation["api_key_set"] is True
    assert "api_key" not in representation

    listed = acme_api.get("/api/v1/deployments")
    assert [d["name"] for d in listed.json()["data"]] == ["gpt"]
    read = acme_api.get("/api/v1/deployments/gpt")
    assert read.json() == representation

    # PUT without api_key keeps the stored key; a GET body posted back is accepted.
    replaced = acme_api.put("/api/v1/deployments/gpt", {**read.json(), "timeout_ms": 5000})
    assert replaced.status_code == 200, replaced.content
    assert replaced.json()["timeout_ms"] == 5000
    assert replaced.json()["api_key_set"] is True
    assert plain_key(acme, "gpt") == KEY
    with schema_context(acme.schema):
        assert upstream_of(Deployment.objects.get(name="gpt")).headers == {
            "OpenAI-Organization": "org-1"
        }

    # A new key through PUT, then PATCH: absent keeps, null clears.
    assert acme_api.put("/api/v1/deployments/gpt", body(api_key="sk-new")).status_code == 200
    assert plain_key(acme, "gpt") == "sk-new"
    patched = acme_api.patch("/api/v1/deployments/gpt", {"may_judge": False, "headers": None})
    assert patched.status_code == 200, patched.content
    assert patched.json()["may_judge"] is False
    assert patched.json()["headers_set"] == []
    assert plain_key(acme, "gpt") == "sk-new"
    cleared = acme_api.patch("/api/v1/deployments/gpt", {"api_key": None})
    assert cleared.json()["api_key_set"] is False
    assert plain_key(acme, "gpt") is None
    assert (
        acme_api.put("/api/v1/deployments/gpt", body(api_key=None)).json()["api_key_set"] is False
    )

    # gpt-4o-mini is priced at its public price until the deployment names its own.
    assert read.json()["price"] is None
    assert read.json()["price_source"] == "default"
    assert read.json()["effective_price"]["input_per_mtok"] == 0.15
    own = {"input_per_mtok": 1.0, "output_per_mtok": 4.0}
    priced = acme_api.patch("/api/v1/deployments/gpt", {"price": own})
    assert priced.status_code == 200, priced.content
    assert priced.json()["price"] == {
        **own,
        "cached_input_per_mtok": None,
        "cache_write_per_mtok": None,
    }
    assert priced.json()["price_source"] == "deployment"
    assert priced.json()["effective_price"]["output_per_mtok"] == 4.0
    refused = acme_api.patch("/api/v1/deployments/gpt", {"price": {"input_per_mtok": -1}})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"].startswith("price")

    responses = [created, listed, read, replaced, patched, cleared]
    assert not any(KEY in r.content.decode() or "sk-new" in r.content.decode() for r in responses)
    assert KEY not in caplog.text and "sk-new" not in caplog.text

    assert acme_api.delete("/api/v1/deployments/gpt").status_code == 204
    assert acme_api.get("/api/v1/deployments/gpt").status_code == 404
    assert acme_api.delete("/api/v1/deployments/gpt").status_code == 404


def test_the_database_holds_a_fernet_token_never_the_key(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    assert acme_api.post("/api/v1/deployments", body()).status_code == 201
    token = stored(acme, "gpt").api_key_encrypted
    assert token and KEY not in token
    assert secrets.decrypt(token) == KEY
    assert KEY not in raw_rows(acme)


def test_upstream_carries_the_plain_key_and_never_shows_it(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    assert acme_api.post("/api/v1/deployments", body(protocol="anthropic")).status_code == 201
    with schema_context(acme.schema):
        deployment = deployment_named("gpt")
        assert deployment is not None
        upstream = upstream_of(deployment)
        assert deployment_named("missing") is None
    assert upstream.api_key == KEY
    assert upstream.protocol == "anthropic"
    assert upstream.headers == {"OpenAI-Organization": "org-1"}
    assert (upstream.timeout_ms, upstream.max_output_tokens, upstream.name) == (30_000, 4096, "gpt")
    assert KEY not in repr(upstream)


def test_a_name_is_taken_once_and_renaming_onto_it_conflicts(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/deployments", body("a")).status_code == 201
    assert acme_api.post("/api/v1/deployments", body("b")).status_code == 201
    again = acme_api.post("/api/v1/deployments", body("a"))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert acme_api.put("/api/v1/deployments/b", body("a")).status_code == 409


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"protocol": "grpc"}, "protocol"),
        ({"name": "no spaces"}, "name"),
        ({"base_url": "ftp://models.example.com"}, "base_url"),
        ({"base_url": "https://user:pw@models.example.com"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"base_url": "https://" + "a" * 2000 + ".com"}, "base_url"),
        ({"headers": {"Authorization": "Bearer sk-x"}}, "headers"),
        ({"headers": {"X-API-Key": "sk-x"}}, "headers"),
        ({"headers": {"X-Tag": 1}}, "headers.X-Tag"),
        ({"headers": {"X-Tag": "a\r\nInjected: yes"}}, "headers"),
        ({"headers": {"bad name": "x"}}, "headers"),
        ({"headers": {f"X-H{i}": "x" for i in range(33)}}, "headers"),
        ({"headers": ["X-Tag"]}, "headers"),
        ({"timeout_ms": 10}, "timeout_ms"),
        ({"timeout_ms": 600_001}, "timeout_ms"),
        ({"timeout_ms": "1000"}, "timeout_ms"),
        ({"max_output_tokens": 200_000}, None),
        ({"api_key": ""}, "api_key"),
        ({"api_key": 42}, "api_key"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_bad_input_is_a_clear_400(
    acme_api: ApiClient, fields: dict[str, Any], param: str | None
) -> None:
    response = acme_api.post("/api/v1/deployments", body(**fields))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["param"] == param
    assert KEY not in response.content.decode()


def test_a_missing_field_and_a_body_that_is_no_object_are_400(acme_api: ApiClient) -> None:
    missing = acme_api.post("/api/v1/deployments", {"name": "gpt", "protocol": "openai"})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "base_url"
    assert acme_api.post("/api/v1/deployments", ["gpt"]).status_code == 400
    assert acme_api.post("/api/v1/deployments", body("gpt")).status_code == 201
    assert acme_api.patch("/api/v1/deployments/gpt", ["x"]).status_code == 400
    bad_patch = acme_api.patch("/api/v1/deployments/gpt", {"protocol": "grpc"})
    assert bad_patch.status_code == 400
    assert bad_patch.json()["error"]["param"] == "protocol"


# --- rotation ------------------------------------------------------------------------------------


def test_rotation_re_encrypts_with_the_new_key_and_the_old_key_alone_no_longer_reads(
    acme_api: ApiClient, acme: TenantFixture, settings: Any
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.DEPLOYMENT_SECRET_KEYS = old
    assert acme_api.post("/api/v1/deployments", body()).status_code == 201
    before = stored(acme, "gpt").api_key_encrypted
    assert Fernet(old.encode()).decrypt(before.encode()).decode() == KEY

    settings.DEPLOYMENT_SECRET_KEYS = f"{new},{old}"
    assert plain_key(acme, "gpt") == KEY  # both keys read until the rotation ran
    output = io.StringIO()
    call_command("rotate_deployment_keys", stdout=output)
    assert "acme: 2 secret(s) re-encrypted" in output.getvalue()  # the key and the header
    after = stored(acme, "gpt").api_key_encrypted
    assert after != before and KEY not in after

    settings.DEPLOYMENT_SECRET_KEYS = new
    assert plain_key(acme, "gpt") == KEY
    with schema_context(acme.schema):
        assert upstream_of(Deployment.objects.get(name="gpt")).headers == {
            "OpenAI-Organization": "org-1"
        }
    settings.DEPLOYMENT_SECRET_KEYS = old
    with pytest.raises(secrets.SecretUnreadable):
        secrets.decrypt(after)
    read = acme_api.get("/api/v1/deployments/gpt")
    assert read.status_code == 200 and read.json()["api_key_set"] is True  # readable metadata


def test_without_the_setting_a_key_derived_from_secret_key_encrypts(settings: Any) -> None:
    settings.DEPLOYMENT_SECRET_KEYS = ""
    token = secrets.encrypt(KEY)
    assert Fernet(secrets.derived_key(settings.SECRET_KEY)).decrypt(token.encode()) == KEY.encode()
    settings.SECRET_KEY = "another-secret-key"
    with pytest.raises(secrets.SecretUnreadable):
        secrets.decrypt(token)


# --- a route's upstream names a deployment -------------------------------------------------------


def route(upstream: Any, name: str = "support") -> dict[str, Any]:
    return {"name": name, "model": {"name": "gpt-4o-mini", "upstream": upstream}}


def test_a_route_names_an_existing_deployment_only(acme_api: ApiClient) -> None:
    refused = acme_api.post("/api/v1/routes", route("gpt"))
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "invalid_request",
        "message": "model.upstream: no deployment named 'gpt'",
        "param": "model.upstream",
    }
    assert acme_api.post("/api/v1/routes", route("not a name")).json()["error"]["param"] == (
        "model.upstream"
    )
    assert acme_api.post("/api/v1/deployments", body()).status_code == 201
    created = acme_api.post("/api/v1/routes", route("gpt"))
    assert created.status_code == 201, created.content
    assert created.json()["model"]["upstream"] == "gpt"
    imported = acme_api.post("/api/v1/routes/import", {"routes": [route("nope", "other")]})
    assert imported.status_code == 400
    assert imported.json()["error"]["param"] == "routes[0].model.upstream"


def test_an_inline_upstream_becomes_a_deployment_of_the_routes_own(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-from-the-environment")
    inline = {
        "url": "http://vllm:8000/v1",
        "model": "llama-3",
        "api_key_env": "VLLM_API_KEY",
        "timeout_ms": 20_000,
    }
    created = acme_api.post("/api/v1/routes", route(inline))
    assert created.status_code == 201, created.content
    assert created.json()["model"]["upstream"] == "support-upstream"
    assert "sk-from-the-environment" not in created.content.decode()

    deployment = stored(acme, "support-upstream")
    assert (deployment.protocol, deployment.base_url, deployment.model) == (
        "openai",
        "http://vllm:8000/v1",
        "llama-3",
    )
    assert deployment.timeout_ms == 20_000
    assert plain_key(acme, "support-upstream") == "sk-from-the-environment"
    with schema_context(acme.schema):
        assert Route.objects.get(name="support").model["upstream"] == "support-upstream"

    # Writing it again updates the same deployment.
    again = acme_api.put("/api/v1/routes/support", route({**inline, "model": "llama-4"}))
    assert again.status_code == 200, again.content
    assert stored(acme, "support-upstream").model == "llama-4"


@pytest.mark.parametrize("variable", ["SECRET_KEY", "DATABASE_URL", "EMBEDDING_API_KEY"])
def test_an_inline_upstream_never_reads_the_platforms_own_settings(
    acme_api: ApiClient, acme: TenantFixture, variable: str
) -> None:
    inline = {"url": "https://collector.example.com/v1", "api_key_env": variable}
    refused = acme_api.post("/api/v1/routes", route(inline))
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "model.upstream.api_key_env"
    with schema_context(acme.schema):
        assert not Deployment.objects.exists()


def test_stored_inline_upstreams_are_migrated_into_deployments(
    acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEGACY_API_KEY", "sk-stored-route")
    migration = importlib.import_module(
        "contextplatform.routes.migrations.0003_route_upstreams_name_deployments"
    )
    inline = {"url": "http://vllm:8000/v1", "model": "m", "api_key_env": "LEGACY_API_KEY"}
    with schema_context(acme.schema):
        Route.objects.create(name="old", model={"context_window": 32_000, "upstream": inline})
        Route.objects.create(name="broken", model={"upstream": {"url": 5}})
        migration.inline_upstreams_to_deployments(apps, None)
        assert Route.objects.get(name="old").model["upstream"] == "old-upstream"
        assert Route.objects.get(name="broken").model["upstream"] is None
        Route.objects.get(name="old").spec()  # loads as a route naming a deployment
    assert stored(acme, "old-upstream").context_window == 32_000
    assert plain_key(acme, "old-upstream") == "sk-stored-route"
