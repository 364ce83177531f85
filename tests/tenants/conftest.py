"""Fixtures of the tenants package's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tenants.models import Tenant


@pytest.fixture
def new_tenant_name(db: Any) -> Iterator[str]:
    """A schema name no tenant has yet; the tenant a test creates under it is dropped after."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    connection.set_schema_to_public()
    tenant = Tenant.objects.filter(schema_name=name).first()
    if tenant is not None:
        # The test runs in a transaction; fire deferred FK checks so the schema can be dropped.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        tenant.delete(force_drop=True)
    assert not Tenant.objects.filter(schema_name=name).exists()
