"""A deployment that configuration names is neither deleted nor renamed: through the API (409
``conflict`` naming the routes), the admin (its delete page, the bulk action, the change form) and
the ORM alike, and nothing changes; once no route names it, it goes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from contextplatform.deployments.errors import DeploymentInUse
from contextplatform.deployments.models import Deployment
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from tests.admin.conftest import ACME_HOST, fast_password_hashing, make_user, signed_in
from tests.conftest import ApiClient, TenantFixture

__all__ = ["fast_password_hashing"]  # the admin tests' autouse fixture, here too


def deployment_body(name: str = "gpt", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        **fields,
    }


def created(api: ApiClient, path: str, body: dict[str, Any]) -> None:
    response = api.post(path, body)
    assert response.status_code == 201, response.content


def names(tenant: TenantFixture) -> list[str]:
    with schema_context(tenant.schema):
        return list(Deployment.objects.order_by("name").values_list("name", flat=True))


def rag_source(name: str, judge: str) -> dict[str, Any]:
    return {
        "type": "rag",
        "name": name,
        "backend": "vectorstore",
        "backend_config": {"collection": "docs"},
        "match": {"judge": {"deployment": judge}},
    }


# --- the API -------------------------------------------------------------------------------------


def test_a_deployment_a_route_forwards_to_is_not_deleted_until_the_route_lets_go(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("gpt"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "gpt"}})
    created(acme_api, "/api/v1/routes", {"name": "sales", "model": {"upstream": "gpt"}})

    refused = acme_api.delete("/api/v1/deployments/gpt")
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "conflict"
    assert "route 'sales' (model.upstream)" in error["message"]
    assert "route 'support' (model.upstream)" in error["message"]
    assert acme_api.get("/api/v1/deployments/gpt").status_code == 200

    assert acme_api.delete("/api/v1/routes/sales").status_code == 204
    still = acme_api.delete("/api/v1/deployments/gpt")
    assert still.status_code == 409
    assert "'support'" in still.json()["error"]["message"]
    assert "'sales'" not in still.json()["error"]["message"]

    # The route names another deployment now: the first one is free.
    created(acme_api, "/api/v1/deployments", deployment_body("claude", protocol="anthropic"))
    moved = acme_api.patch("/api/v1/routes/support", {"model": {"upstream": "claude"}})
    assert moved.status_code == 200, moved.content
    assert acme_api.delete("/api/v1/deployments/gpt").status_code == 204
    assert names(acme) == ["claude"]


def test_judges_extractors_and_layers_that_name_it_are_each_reported(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("judge"))
    created(acme_api, "/api/v1/deployments", deployment_body("local"))
    # Written as stored (the judge's names are checked against the environment when a route is
    # written through the API; a stored route names what its JSON says).
    with schema_context(acme.schema):
        recipe = Recipe.objects.create(
            name="judged", context={"sources": [rag_source("docs", "judge")]}
        )
        Route.objects.create(name="on-recipe", recipe=recipe)
        Route.objects.create(
            name="extracts",
            context={
                "sources": [
                    {"type": "memory", "name": "memories", "store": {"extractor": "judge"}},
                    {"type": "memory", "name": "plain", "store": {"extractor": "local"}},
                ]
            },
        )
        TenantDefaults.objects.create(
            context={"compress": {"match": {"judge": {"deployment": "judge"}}}}
        )

    refused = acme_api.delete("/api/v1/deployments/judge")
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    for place in (
        "route 'extracts' (context.sources[0].store.extractor)",
        "route 'extracts' (context.compress.match.judge.deployment)",  # inherited from the defaults
        "route 'on-recipe' (context.sources[0].match.judge.deployment)",  # from its recipe
        "recipe 'judged' (context.sources[0].match.judge.deployment)",
        "tenant defaults (context.compress.match.judge.deployment)",
    ):
        assert place in message, message
    assert "sources[1]" not in message  # "local" is the local extractor, not a deployment

    # "local" in a judge or extractor field names the local one: the deployment so named is free.
    assert acme_api.delete("/api/v1/deployments/local").status_code == 204
    assert names(acme) == ["judge"]


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_rename_is_refused_while_a_route_names_the_old_name(
    acme: TenantFixture, acme_api: ApiClient, method: str
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("gpt"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "gpt"}})
    write = getattr(acme_api, method)
    renamed = deployment_body("gpt-4") if method == "put" else {"name": "gpt-4"}

    refused = write("/api/v1/deployments/gpt", renamed)
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "conflict"
    assert "cannot be renamed to 'gpt-4'" in refused.json()["error"]["message"]
    assert "route 'support' (model.upstream)" in refused.json()["error"]["message"]
    assert names(acme) == ["gpt"]
    # Other changes are no rename.
    assert write("/api/v1/deployments/gpt", deployment_body("gpt", model="o4")).status_code == 200

    assert acme_api.delete("/api/v1/routes/support").status_code == 204
    assert write("/api/v1/deployments/gpt", renamed).status_code == 200
    assert names(acme) == ["gpt-4"]


def test_the_orm_refuses_too_and_a_bulk_delete_removes_nothing(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("free"))
    created(acme_api, "/api/v1/deployments", deployment_body("used"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "used"}})
    with schema_context(acme.schema):
        with pytest.raises(DeploymentInUse) as refused, transaction.atomic():
            Deployment.objects.all().delete()
        assert refused.value.routes == ("support",)
        assert refused.value.status == 409
    assert names(acme) == ["free", "used"]


# --- the admin -----------------------------------------------------------------------------------


def operator(acme: TenantFixture) -> Client:
    make_user(acme.tenant, "deployment_operator", "operator")
    return signed_in("deployment_operator", ACME_HOST)


def pk_of(acme: TenantFixture, name: str) -> int:
    with schema_context(acme.schema):
        return int(Deployment.objects.get(name=name).pk)


def said(response: Any) -> list[str]:
    """The messages the page a redirect led to showed (shown, they are gone)."""
    return [str(message) for message in response.context["messages"]]


def test_the_admin_delete_page_refuses_with_the_routes_and_deletes_nothing(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("gpt"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "gpt"}})
    client = operator(acme)
    pk = pk_of(acme, "gpt")
    delete = reverse("admin:deployments_deployment_delete", args=[pk])
    change = reverse("admin:deployments_deployment_change", args=[pk])

    page = client.get(delete, follow=True)
    assert page.redirect_chain == [(change, 302)]
    assert said(page) == [
        "deployment 'gpt' cannot be deleted: it is named by route 'support' (model.upstream); "
        "point them at another deployment first"
    ]

    confirmed = client.post(delete, {"post": "yes"}, follow=True)
    assert confirmed.redirect_chain == [(change, 302)]
    assert [text[:40] for text in said(confirmed)] == ["deployment 'gpt' cannot be deleted: it i"]
    assert "cannot be deleted: it is named by route &#x27;support&#x27;" in (
        confirmed.content.decode()
    )
    assert names(acme) == ["gpt"]

    assert acme_api.delete("/api/v1/routes/support").status_code == 204
    assert client.get(delete).status_code == 200  # the confirmation page, now
    gone = client.post(delete, {"post": "yes"})
    assert gone.status_code == 302
    assert names(acme) == []


def test_the_admin_bulk_delete_is_all_or_nothing(acme: TenantFixture, acme_api: ApiClient) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("free"))
    created(acme_api, "/api/v1/deployments", deployment_body("used"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "used"}})
    client = operator(acme)
    changelist = reverse("admin:deployments_deployment_changelist")
    selected = [str(pk_of(acme, "free")), str(pk_of(acme, "used"))]
    action = {"action": "delete_selected", "_selected_action": selected, "post": "yes"}

    refused = client.post(changelist, action, follow=True)
    assert refused.redirect_chain == [(changelist, 302)]
    assert said(refused) == [
        "Nothing was deleted: deployment 'used' cannot be deleted: it is named by route 'support' "
        "(model.upstream); point them at another deployment first"
    ]
    assert names(acme) == ["free", "used"]
    with schema_context(acme.schema):
        from django.contrib.admin.models import DELETION, LogEntry

        assert not LogEntry.objects.filter(action_flag=DELETION).exists()

    assert acme_api.delete("/api/v1/routes/support").status_code == 204
    deleted = client.post(changelist, action, follow=True)
    assert said(deleted) == ["Successfully deleted 2 deployments."]
    assert names(acme) == []


def test_the_admin_change_form_refuses_a_rename_next_to_the_name(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    created(acme_api, "/api/v1/deployments", deployment_body("gpt"))
    created(acme_api, "/api/v1/routes", {"name": "support", "model": {"upstream": "gpt"}})
    client = operator(acme)
    change = reverse("admin:deployments_deployment_change", args=[pk_of(acme, "gpt")])
    fields = {
        "name": "gpt-4",
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        "api_key": "",
        "timeout_ms": "60000",
        "context_window": "128000",
        "max_output_tokens": "",
        "headers": "{}",
        "may_judge": "on",
    }
    response = client.post(change, fields)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["name"]
    assert "cannot be renamed to 'gpt-4'" in errors["name"][0]
    assert "route 'support' (model.upstream)" in errors["name"][0]
    assert names(acme) == ["gpt"]

    kept = client.post(change, {**fields, "name": "gpt", "model": "o4"})
    assert kept.status_code == 302
    with schema_context(acme.schema):
        assert Deployment.objects.get(name="gpt").model == "o4"
