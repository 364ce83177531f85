"""The page at / of every host (the admin's "View site"), and the product's name on the admin's
pages instead of Django's (tests/browser/test_admin_look.py looks at them in Chromium)."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.conftest import TenantFixture, logged_in

ACME = "acme.localhost"
PLATFORM = "127.0.0.1"  # no tenant's domain: the platform host


def test_a_tenant_host_answers_home_with_the_product_the_tenant_and_its_pages(
    acme: TenantFixture,
) -> None:
    page = Client().get("/", HTTP_HOST=ACME)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Context Platform" in html and acme.tenant.name in html
    for link in ('href="/admin/"', 'href="/api/docs/"', 'href="/admin/live/"'):
        assert link in html
    assert "/static/brand/favicon.svg" in html


def test_the_platform_host_answers_home_without_a_dashboard(db: Any) -> None:
    page = Client().get("/", HTTP_HOST=PLATFORM)
    assert page.status_code == 200
    html = page.content.decode()
    assert "· platform" in html and 'href="/admin/"' in html
    assert "/admin/live/" not in html


def test_the_admin_names_the_product_and_the_tenant_and_views_the_home_page(
    acme: TenantFixture,
) -> None:
    login = Client().get("/admin/login/", HTTP_HOST=ACME).content.decode()
    assert "Django administration" not in login
    assert "Context Platform" in login and acme.tenant.name in login
    assert 'rel="icon"' in login
    index = logged_in(acme.schema).get("/admin/", HTTP_HOST=ACME).content.decode()
    assert "Django" not in index
    assert 'href="/">View site' in index
