"""The operators' deployment pages: the key is write-only (blank keeps it, "remove" clears it, no
page shows it), and the admin refuses what the API refuses, next to the field."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import upstream_of
from tests.admin.conftest import ACME_HOST, fast_password_hashing, make_user, signed_in
from tests.conftest import TenantFixture

__all__ = ["fast_password_hashing"]  # the admin tests' autouse fixture, here too

KEY = "sk-admin-typed-secret-key"


def form(**fields: str) -> dict[str, str]:
    return {
        "name": "gpt",
        "protocol": "anthropic",
        "base_url": "https://api.anthropic.com",
        "model": "claude-sonnet",
        "api_key": "",
        "timeout_ms": "60000",
        "context_window": "200000",
        "max_output_tokens": "",
        "headers": '{"anthropic-beta": "tools-2024"}',
        "may_judge": "on",
        **fields,
    }


def operator(acme: TenantFixture) -> Client:
    make_user(acme.tenant, "deployment_operator", "operator")
    return signed_in("deployment_operator", ACME_HOST)


def stored(acme: TenantFixture) -> tuple[Deployment, str | None]:
    with schema_context(acme.schema):
        deployment = Deployment.objects.get(name="gpt")
        return deployment, upstream_of(deployment).api_key


def change_url(deployment: Deployment) -> str:
    return reverse("admin:deployments_deployment_change", args=[deployment.pk])


def test_the_key_is_written_kept_and_removed_but_never_shown(acme: TenantFixture) -> None:
    client = operator(acme)
    added = client.post(reverse("admin:deployments_deployment_add"), form(api_key=KEY))
    assert added.status_code == 302, added.content.decode()[:2000]
    deployment, key = stored(acme)
    assert key == KEY
    with schema_context(acme.schema):
        assert upstream_of(deployment).headers == {"anthropic-beta": "tools-2024"}

    page = client.get(change_url(deployment))
    assert page.status_code == 200
    assert KEY not in page.content.decode()
    assert deployment.api_key_encrypted not in page.content.decode()

    kept = client.post(change_url(deployment), form(model="claude-opus"))
    assert kept.status_code == 302
    deployment, key = stored(acme)
    assert (deployment.model, key) == ("claude-opus", KEY)

    removed = client.post(change_url(deployment), form(clear_api_key="on"))
    assert removed.status_code == 302
    assert stored(acme)[1] is None
    listing = client.get(reverse("admin:deployments_deployment_changelist"))
    assert KEY not in listing.content.decode()


def field_errors(response: Any) -> dict[str, list[str]]:
    return {
        name: list(errors) for name, errors in response.context["adminform"].form.errors.items()
    }


def test_the_admin_refuses_what_the_api_refuses_next_to_the_field(acme: TenantFixture) -> None:
    client = operator(acme)
    add = reverse("admin:deployments_deployment_add")
    for fields, field in (
        ({"headers": '{"Authorization": "Bearer sk-x"}'}, "headers"),
        ({"headers": "[" * 5000 + "]" * 5000}, "headers"),  # past the boundary's nesting
        ({"base_url": "ftp://models.example.com"}, "base_url"),
        ({"timeout_ms": "5"}, "timeout_ms"),
    ):
        response = client.post(add, form(api_key=KEY, **fields))
        assert response.status_code == 200, fields
        assert field in field_errors(response), field_errors(response)
        assert KEY not in response.content.decode()
    with schema_context(acme.schema):
        assert not Deployment.objects.exists()
