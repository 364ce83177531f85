"""Each test of the sources starts where a fresh request starts: in the public schema.

The test client's tenant middleware leaves the connection in the last request's tenant, and a
judge's deployment name is looked up among the tenant's deployments when the connection is in a
tenant's schema (``contextplatform.deployments.llm``): a test without the database must not
inherit the previous test's tenant. Setting the schema touches no database.
"""

from __future__ import annotations

import pytest
from django.db import connection


@pytest.fixture(autouse=True)
def public_schema_first() -> None:
    connection.set_schema_to_public()
