"""The admin's JSON fields under the boundary's limits, as the REST API's bodies: a number jsonb
and the renderer do not round-trip and nesting past 64 levels are a form error naming where they
are, and nothing is saved (the REST API's side: tests/reliability/test_boundary_values.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from django.urls import reverse
from django_tenants.utils import schema_context

from tests.conftest import TenantFixture

TOO_WIDE = "a number must be finite and within ±9223372036854775807"


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ('{"a": {"n": 1e20}}', f"a.n: {TOO_WIDE}"),
        ('{"a": [18446744073709551616]}', f"a[0]: {TOO_WIDE}"),
        ('{"n": NaN}', f"n: {TOO_WIDE}"),
        ('{"n": -Infinity}', f"n: {TOO_WIDE}"),
        ('{"a": ' + "[" * 64 + "]" * 64 + "}", "nested deeper than 64 levels"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ],
    ids=["1e20", "2^64", "NaN", "-Infinity", "65 levels", "5,000 levels"],
)
def test_a_memorys_metadata_in_the_admin_refuses_what_would_not_read_back(
    acme: TenantFixture, admin_client_for: Callable[[str], Client], metadata: str, says: str
) -> None:
    from memory.models import Memory

    client = admin_client_for("superuser")
    fields = {
        "user_id": "u2",
        "kind": "fact",
        "content": "c",
        "expires_at_0": "",
        "expires_at_1": "",
    }
    page = client.post(reverse("admin:memory_memory_add"), {**fields, "metadata": metadata})
    assert page.status_code == 200, page.status_code  # the form again, with its error
    assert says in page.content.decode(), page.content.decode()[:3000]
    with schema_context(acme.schema):
        assert not Memory.objects.filter(user_id="u2").exists()
    # The same memory with a number that round-trips is saved.
    saved = client.post(reverse("admin:memory_memory_add"), {**fields, "metadata": '{"n": 1e18}'})
    assert saved.status_code == 302, saved.content.decode()[:3000]
    with schema_context(acme.schema):
        assert Memory.objects.get(user_id="u2").metadata == {"n": 10**18}
