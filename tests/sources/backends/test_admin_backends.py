"""The route page's backend columns for rag sources (backend, collection / store, server, secret,
content and metadata fields) instead of JSON only: stored as the API stores them, shown again
(the secret never, only that one is stored), kept on a resubmit, errors in their column; and the
recipe and tenant-defaults pages showing a layer's secrets as {"set": true} only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.core import secrets
from contextplatform.routes.models import Recipe, Route
from sources.secret_settings import SHOWN
from tests.admin.conftest import ACME_HOST, make_user, signed_in
from tests.admin.forms import form_data
from tests.admin.test_operator_admin import ROUTES, cell_error, route_form
from tests.conftest import ApiClient, TenantFixture, admin_object_url

TOKEN = "milvus-token-0123456789"
KEY = "sk-admin-0123456789"

MILVUS_ROW = {
    "name": "kb",
    "type": "rag",
    "enabled": "on",
    "backend": "milvus",
    "backend_target": "docs",
    "backend_server": "kb.db",
    "backend_secret": TOKEN,
    "content_field": "text",
    "metadata_field": "metadata",
    "settings": '{"match": {"recall": {"top_k": 5, "min_similarity": 0.2}}}',
    "ORDER": "1",
}
OPENAI_ROW = {
    "name": "files",
    "type": "rag",
    "enabled": "on",
    "backend": "openai",
    "backend_target": "vs_abc123",
    "backend_server": "https://api.openai.com/v1",
    "backend_secret": KEY,
    "settings": '{"backend_config": {"max_num_results": 8}}',
    "ORDER": "2",
}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def admin_for(acme: TenantFixture) -> Callable[[str], Client]:
    """A client signed in to acme's admin (the real login page) as a new user holding ``role``."""

    def make(role: str) -> Client:
        make_user(acme.tenant, f"user_{role}", role)
        return signed_in(f"user_{role}", ACME_HOST)

    return make


@pytest.fixture
def operator(admin_for: Callable[[str], Client]) -> Client:
    return admin_for("superuser")


def stored(name: str = "support") -> Route:
    with schema_context("acme"):
        return Route.objects.get(name=name)


def config_of(route: Route, index: int) -> dict[str, Any]:
    return route.context["sources"][index]["backend_config"]


def plain(envelope: Any) -> str:
    assert isinstance(envelope, dict) and set(envelope) == {"encrypted"}, envelope
    return secrets.decrypt(envelope["encrypted"])


def test_backend_columns_are_stored_as_the_api_stores_them(
    acme: TenantFixture, operator: Client
) -> None:
    page = operator.get(f"{ROUTES}add/").content.decode()
    for column in ("backend", "backend_target", "backend_server", "backend_secret"):
        assert f'name="sources-__prefix__-{column}"' in page
    saved = operator.post(f"{ROUTES}add/", route_form(rows=[MILVUS_ROW, OPENAI_ROW]))
    assert saved.status_code == 302, saved.content.decode()[-3000:]
    route = stored()
    milvus, openai = route.context["sources"]
    assert milvus["backend"] == "milvus" and milvus["match"]["recall"]["top_k"] == 5
    assert {k: v for k, v in config_of(route, 0).items() if k != "token"} == {
        "collection": "docs",
        "uri": "kb.db",
        "content_field": "text",
        "metadata_field": "metadata",
    }
    assert plain(config_of(route, 0)["token"]) == TOKEN
    assert openai["backend"] == "openai"
    assert config_of(route, 1)["vector_store_id"] == "vs_abc123"
    assert config_of(route, 1)["max_num_results"] == 8
    assert plain(config_of(route, 1)["api_key"]) == KEY


def test_the_change_page_shows_the_columns_never_the_secret_and_a_resubmit_keeps_it(
    acme: TenantFixture, operator: Client
) -> None:
    assert (
        operator.post(f"{ROUTES}add/", route_form(rows=[MILVUS_ROW, OPENAI_ROW])).status_code == 302
    )
    route = stored()
    token = config_of(route, 0)["token"]
    page = operator.get(admin_object_url(Route, route.pk)).content.decode()
    assert TOKEN not in page and KEY not in page and token["encrypted"] not in page
    data = form_data(page, "route_form")
    assert data["sources-0-backend"] == ["milvus"]
    assert data["sources-0-backend_target"] == ["docs"]
    assert data["sources-0-backend_server"] == ["kb.db"]
    assert data["sources-0-backend_secret"] == [""]  # write-only
    assert "stored: blank keeps it" in page
    assert data["sources-1-backend_target"] == ["vs_abc123"]
    assert json.loads(data["sources-1-settings"][0]) == {"backend_config": {"max_num_results": 8}}

    assert operator.post(admin_object_url(Route, route.pk), data).status_code == 302
    again = stored()
    assert again.context == route.context  # the same tokens, nothing else changed

    data["sources-0-backend_secret"] = ["a-new-token-value"]
    assert operator.post(admin_object_url(Route, route.pk), data).status_code == 302
    assert plain(config_of(stored(), 0)["token"]) == "a-new-token-value"
    assert config_of(stored(), 1)["api_key"] == config_of(route, 1)["api_key"]


def test_backend_errors_land_in_their_column(acme: TenantFixture, operator: Client) -> None:
    missing = {**MILVUS_ROW, "backend_target": ""}
    response = operator.post(f"{ROUTES}add/", route_form(rows=[missing]))
    assert response.status_code == 200
    assert "field required" in cell_error(response.content.decode(), "backend_target").lower()

    lite = {**MILVUS_ROW, "backend_server": "/etc/kb.db"}
    response = operator.post(f"{ROUTES}add/", route_form(rows=[lite]))
    assert "Milvus Lite" in cell_error(response.content.decode(), "backend_server")

    rules = {"name": "rules", "type": "skill_guardrails", "texts": "Be kind.", "backend": "milvus"}
    response = operator.post(f"{ROUTES}add/", route_form(rows=[rules]))
    assert "has no backend" in cell_error(response.content.decode(), "backend")

    no_field = {**OPENAI_ROW, "content_field": "text"}
    response = operator.post(f"{ROUTES}add/", route_form(rows=[no_field]))
    assert "has no content field" in cell_error(response.content.decode(), "content_field")
    with schema_context("acme"):
        assert not Route.objects.exists()


def test_layer_pages_show_secrets_as_set_and_keep_them(
    acme: TenantFixture,
    operator: Client,
    acme_api: ApiClient,
    admin_for: Callable[[str], Client],
) -> None:
    source = {
        "type": "rag",
        "name": "kb",
        "backend": "qdrant",
        "backend_config": {"collection": "docs", "url": "kb", "api_key": KEY},
    }
    document = {
        "recipes": [
            {
                "name": "house",
                "plugins": [{"type": "context", "configuration": {"sources": [source]}}],
            }
        ]
    }
    assert acme_api.post("/api/v1/routes/import", document).status_code == 200
    with schema_context("acme"):
        recipe = Recipe.objects.get(name="house")
    stored_key = recipe.context["sources"][0]["backend_config"]["api_key"]
    page = operator.get(admin_object_url(Recipe, recipe.pk)).content.decode()
    assert KEY not in page and stored_key["encrypted"] not in page
    data = form_data(page, "recipe_form")
    shown = json.loads(data["context"][0])
    assert shown["sources"][0]["backend_config"]["api_key"] == SHOWN
    assert operator.post(admin_object_url(Recipe, recipe.pk), data).status_code == 302
    with schema_context("acme"):
        assert Recipe.objects.get(pk=recipe.pk).context == recipe.context

    auditor = admin_for("auditor")
    viewed = auditor.get(admin_object_url(Recipe, recipe.pk))
    assert viewed.status_code == 200
    text = viewed.content.decode()
    assert (
        KEY not in text and stored_key["encrypted"] not in text and "&quot;set&quot;: true" in text
    )
