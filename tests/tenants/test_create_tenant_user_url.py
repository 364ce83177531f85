"""``create_tenant_user`` prints the tenant admin's sign-in URL on the port the server listens on:
``--port``, else ``$PORT`` (what ``make run`` serves on), else 8000."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

PASSWORD = "a-long-enough-password-1"


def created(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command("create_tenant_user", "acme", *args, "--password", PASSWORD, stdout=out, **options)
    connection.set_schema_to_public()
    return out.getvalue().strip()


def test_the_default_port_is_makes_run(acme: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORT", raising=False)
    output = created("ul_a", "--role", "auditor")
    assert output.endswith("sign in at http://acme.localhost:8000/admin/"), output


def test_the_port_comes_from_the_environment(acme: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "8123")
    output = created("ul_b", "--role", "auditor")
    assert output.endswith("sign in at http://acme.localhost:8123/admin/"), output


def test_the_port_option_wins(acme: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "8123")
    output = created("ul_c", "--role", "auditor", "--port", "9000")
    assert output.endswith("sign in at http://acme.localhost:9000/admin/"), output
    assert created("ul_d", "--role", "auditor", "--port", "80").endswith(
        "sign in at http://acme.localhost/admin/"
    )
