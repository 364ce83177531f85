"""Test fixtures: real PostgreSQL (embedded, or DATABASE_URL) with two tenants, acme and globex."""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import connection, models
from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from tenants.models import Tenant


@dataclass
class TenantFixture:
    tenant: Tenant
    key: str

    @property
    def schema(self) -> str:
        return self.tenant.schema_name


TENANT_KEYS: dict[str, str] = {}


@pytest.fixture(scope="session", autouse=True)
def isolated_task_and_cache_settings() -> None:
    """Tasks run inline (a test that needs a real worker starts one), and this run's cache keys
    never meet an earlier run's in a shared Redis."""
    from django.conf import settings
    from django.test.signals import clear_cache_handlers

    from contextplatform.celery import app

    app.conf.task_always_eager = True
    # Each test runs in a transaction that is rolled back; a writer thread's own connection would
    # commit replay records past it. Tests write them inline; the live-server tests (and
    # tests/replay/test_writer.py) run the background writer.
    settings.REPLAY_WRITES = "inline"
    # The background writer's spool, and the live servers' (tests/live.py passes the environment
    # on), in a folder of this run: a spool is replayed into whichever database finds it.
    spool = tempfile.mkdtemp(prefix="replay-spool-")
    settings.REPLAY_SPOOL_DIR = Path(spool)
    os.environ["REPLAY_SPOOL_DIR"] = spool
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": prefix} for name, config in settings.CACHES.items()
    }
    # Anything that touched the cache before this (collection, a plugin's setup) left the handler
    # holding the old settings: forget them, as Django's own settings override does.
    clear_cache_handlers(setting="CACHES")
    # The live servers the tests start use the same prefix (tests/live.py passes it on).
    os.environ["CACHE_KEY_PREFIX"] = prefix


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    from django.test.utils import setup_databases, teardown_databases

    from tenants.services import create_tenant, issue_api_key

    created = None
    if not connection.settings_dict["NAME"].startswith("test_"):
        # pytest-django sets the test database up only when a collected test asks for it (``db``,
        # a ``django_db`` mark); live-server tests talk HTTP and ask for none, so a selection of
        # them alone gets it here (never the development database).
        with django_db_blocker.unblock():
            created = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    with django_db_blocker.unblock():
        for name in ("acme", "globex"):
            existing = Tenant.objects.filter(
                schema_name=name
            ).first()  # a kept (--reuse-db) database
            if existing is None:
                _, issued = create_tenant(name=name)
            else:
                issued = issue_api_key(tenant=existing, name="tests")
            TENANT_KEYS[name] = issued.plain_key
    yield
    from contextplatform.core import config_cache

    config_cache.stop_listening()  # its connection would keep the test database from dropping
    if created is not None:
        with django_db_blocker.unblock():
            teardown_databases(created, verbosity=0)


def _tenant(name: str) -> TenantFixture:
    connection.set_schema_to_public()
    return TenantFixture(tenant=Tenant.objects.get(schema_name=name), key=TENANT_KEYS[name])


@pytest.fixture
def acme(db: Any) -> TenantFixture:
    return _tenant("acme")


@pytest.fixture
def globex(db: Any) -> TenantFixture:
    return _tenant("globex")


class ApiClient:
    """A test client that speaks JSON with an API key."""

    def __init__(self, key: str | None):
        self.client = Client()
        self.key = key

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        merged = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        merged.update(headers or {})
        return merged

    def get(
        self, path: str, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        return self.client.get(path, params or {}, headers=self._headers(headers))

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        import json

        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        return self.client.generic(
            method, path, data, content_type=content_type, headers=self._headers(headers)
        )

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.send("POST", path, body, **kwargs)

    def put(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.send("PUT", path, body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.send("PATCH", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.send("DELETE", path, None, **kwargs)


@pytest.fixture
def acme_api(acme: TenantFixture) -> ApiClient:
    return ApiClient(acme.key)


@pytest.fixture
def globex_api(globex: TenantFixture) -> ApiClient:
    return ApiClient(globex.key)


@pytest.fixture
def anonymous_api(db: Any) -> ApiClient:
    return ApiClient(None)


@pytest.fixture
def in_acme(acme: TenantFixture) -> Iterator[TenantFixture]:
    with schema_context(acme.schema):
        yield acme
    connection.set_schema_to_public()


def logged_in(schema: str, *, staff: bool = True) -> Client:
    """A client signed in (without the login page) as a new user of ``schema``'s admin."""
    with schema_context(schema):
        user = get_user_model().objects.create_user(
            username=f"user-{uuid.uuid4().hex[:6]}", password="unused-pass", is_staff=staff
        )
        client = Client()
        client.force_login(user)
    connection.set_schema_to_public()
    return client


def admin_object_url(model: type[models.Model], pk: Any, view: str = "change") -> str:
    """The admin page of one object, its key quoted as the admin quotes it: ``job_40ab…`` must
    not be sent as is, since the admin reads ``_40`` as an escaped ``@``."""
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=[quote(pk)])


def side_connection() -> psycopg.Connection:
    """A connection of its own to the test database: what it commits, the test's transaction
    sees; what it locks, the test's queries wait for."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        options="-c lock_timeout=5000",  # never wait forever on the test's own transaction
    )


@contextmanager
def holding(
    holder: psycopg.Connection, sql: str, params: Sequence[Any] = (), *, give_up_s: float = 30.0
) -> Iterator[threading.Event]:
    """``holder`` runs ``sql`` (a lock) and keeps its transaction open for the block. The event is
    set when the lock is let go after ``give_up_s`` because the block still runs: a request that
    answered while the lock was held sees it unset (and a regression fails instead of hanging)."""
    gave_up = threading.Event()
    letting_go = threading.Lock()
    done = threading.Event()

    def give_up() -> None:
        with letting_go:
            if not done.is_set():
                gave_up.set()
                holder.rollback()

    timer = threading.Timer(give_up_s, give_up)
    try:
        holder.execute(sql, params)
        timer.start()
        yield gave_up
    finally:
        timer.cancel()
        with letting_go:
            done.set()
            holder.rollback()


@contextmanager
def table_locked(
    schema: str, table: str, mode: str = "ACCESS EXCLUSIVE", *, give_up_s: float = 30.0
) -> Iterator[threading.Event]:
    """Another connection holds a lock on ``schema.table`` for the block (see ``holding``)."""
    holder = side_connection()
    try:
        lock = f'LOCK TABLE "{schema}".{table} IN {mode} MODE'
        with holding(holder, lock, give_up_s=give_up_s) as gave_up:
            yield gave_up
    finally:
        holder.close()


REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def redis_url() -> str:
    """A Redis that answers: a test is skipped without one, and fails if ``REDIS_URL`` names one
    that does not answer."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except redis.RedisError as error:
        if "REDIS_URL" in os.environ:
            pytest.fail(f"REDIS_URL={REDIS_URL} is set but Redis does not answer: {error}")
        pytest.skip(f"no Redis at {REDIS_URL} (set REDIS_URL): {error}")
    return REDIS_URL
