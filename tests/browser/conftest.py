"""Browser tests: headless Debian Chromium (``make browser`` installs it) driven by Playwright,
against a real uvicorn on the test database (``tests.live.live_server``).

The server is another process: what a test sets up must be committed. Routes go through the
HTTP API (``acme_http``); admin users are written through the ORM by ``admin_users`` and deleted
afterwards. Playwright's sync API runs an event loop in this thread, where Django refuses ORM
calls, so ORM work runs in a short-lived thread (``in_database``) with its own connection, in
autocommit. Every test here is marked ``django_db`` only so that pytest-django sets the test
database up when the browser tests run alone; the test transaction it opens (before the browser
starts) stays empty.

A test logs in with ``log_in(page, tenant_url(server, "acme"), user)``; ``expect`` waits up to
``TIMEOUT_MS`` for what it asserts.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from tests.conftest import TENANT_KEYS
from tests.live import live_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP *.localhost 127.0.0.1",  # tenant hosts on the loopback server
]
TIMEOUT_MS = 20_000
PASSWORD = "browser-pass-word-1"

expect.set_options(timeout=TIMEOUT_MS)

T = TypeVar("T")
BROWSER_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BROWSER_TESTS in Path(item.path).parents:
            item.add_marker(pytest.mark.django_db)


# --- the server and the browser --------------------------------------------------------------------


@pytest.fixture(scope="package")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """``http://127.0.0.1:PORT``: the platform host; tenants are ``tenant_url(server, schema)``."""
    with django_db_blocker.unblock(), live_server() as base:
        yield base


def tenant_url(server: str, schema: str) -> str:
    """The tenant's own host on the same server (its admin site lives there)."""
    return f"http://{schema}.localhost:{urlsplit(server).port}"


@pytest.fixture
def playwright() -> Iterator[Playwright]:
    """Per test, after the test's (empty) transaction is open: Django's check refuses database
    calls while Playwright's event loop runs in this thread."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def browser(playwright: Playwright) -> Iterator[Browser]:
    chromium = playwright.chromium.launch(
        executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    yield chromium
    chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh context (no cookies) per test; an uncaught script error fails the test."""
    context = browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    script_errors: list[str] = []
    tab.on("pageerror", lambda error: script_errors.append(str(error)))
    yield tab
    context.close()
    assert not script_errors, f"script errors in the page: {script_errors}"


def log_in(page: Page, tenant: str, user: AdminUser) -> None:
    """Through the admin's own login page, as a person would."""
    page.goto(f"{tenant}/admin/login/?next=/admin/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", user.password)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(user.username)


# --- committed data --------------------------------------------------------------------------------


def run_in_thread(work: Callable[[], T]) -> T:
    from django.db import connections

    def isolated() -> T:
        try:
            return work()
        finally:
            connections.close_all()  # this thread's connection; the test database must drop

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(isolated).result()


@pytest.fixture
def in_database(django_db_setup: Any, django_db_blocker: Any) -> Callable[[Callable[[], T]], T]:
    """Run ORM work, committed at once (autocommit), away from Playwright's event loop."""

    def run(work: Callable[[], T]) -> T:
        with django_db_blocker.unblock():
            return run_in_thread(work)

    return run


@dataclass(frozen=True)
class AdminUser:
    schema: str
    username: str
    password: str


class AdminUsers:
    """Creates active staff users in a tenant's schema; deletes them when the test ends."""

    def __init__(self, in_database: Callable[[Callable[[], Any]], Any]) -> None:
        self.in_database = in_database
        self.created: list[AdminUser] = []

    def create(
        self, schema: str, *, role: str | None = None, permissions: tuple[str, ...] = ()
    ) -> AdminUser:
        """A user of one role (``tenants.roles``: operator, auditor, memory_manager), or a bare
        staff user with ``permissions`` as ``"app_label.codename"``."""
        user = AdminUser(schema, f"browser-{uuid.uuid4().hex[:8]}", PASSWORD)
        self.in_database(lambda: save_staff_user(user, role, permissions))
        self.created.append(user)
        return user

    def delete_all(self) -> None:
        for user in self.created:
            self.in_database(lambda user=user: delete_user(user))


def save_staff_user(user: AdminUser, role: str | None, permissions: tuple[str, ...]) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django_tenants.utils import schema_context

    from tenants.admin_users import create_admin_user
    from tenants.models import Tenant

    if role is not None:
        tenant = Tenant.objects.get(schema_name=user.schema)
        create_admin_user(tenant=tenant, username=user.username, password=user.password, role=role)
        return
    with schema_context(user.schema):
        saved = get_user_model().objects.create_user(
            username=user.username, password=user.password, is_staff=True
        )
        for name in permissions:
            app_label, codename = name.split(".")
            saved.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


def delete_user(user: AdminUser) -> None:
    from django.contrib.auth import get_user_model
    from django_tenants.utils import schema_context

    with schema_context(user.schema):
        get_user_model().objects.filter(username=user.username).delete()


@pytest.fixture
def admin_users(in_database: Callable[[Callable[[], Any]], Any]) -> Iterator[AdminUsers]:
    users = AdminUsers(in_database)
    yield users
    users.delete_all()


class TenantApi:
    """The platform's HTTP API on the live server with a tenant's key; routes it creates are
    deleted when the test ends."""

    def __init__(self, server: str, schema: str) -> None:
        self.client = httpx.Client(
            base_url=server,
            timeout=30,
            headers={"Authorization": f"Bearer {TENANT_KEYS[schema]}"},
        )
        self.routes: list[str] = []

    def create_route(
        self,
        name: str,
        sources: list[dict[str, Any]],
        context: dict[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        """``context`` adds to the sources (``budget``, ``injection``...); ``fields`` to the route."""
        body = {"name": name, "context": {"sources": sources, **(context or {})}, **fields}
        response = self.client.post("/api/v1/routes", json=body)
        assert response.status_code == 201, response.text
        self.routes.append(name)

    def route(self, name: str) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/routes/{name}")
        assert response.status_code == 200, response.text
        return response.json()

    def resolve(self, route: str, query: str = "hi") -> dict[str, Any]:
        body = {
            "route": route,
            "user": "u1",
            "request": {"messages": [{"role": "user", "content": query}]},
        }
        response = self.client.post("/api/v1/resolve", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def close(self) -> None:
        for name in self.routes:
            self.client.delete(f"/api/v1/routes/{name}")
        self.client.close()


@pytest.fixture
def acme_http(server: str) -> Iterator[TenantApi]:
    api = TenantApi(server, "acme")
    yield api
    api.close()


def unique(prefix: str) -> str:
    """Names no other test (or a run sharing the server's Redis) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
