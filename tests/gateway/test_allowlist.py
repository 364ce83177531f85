"""The tenant's outbound allow-list as the gateway reads it: a ``host:port`` entry reaches the
upstream on that port only, and an entry written into the database past every validating write
path refuses the call as the guard refuses any address it does not allow (502 in the provider's
shape), never a server error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django_tenants.utils import get_public_schema_name, schema_context

from tenants.models import Tenant
from tests.gateway.conftest import Gateway
from tests.loopback import LOOPBACK
from tests.upstream import LoopbackUpstream

CHANGE_WAIT_S = 30  # an upper bound for the server to see the saved tenant, not a measured time


@pytest.fixture
def stored_allowlist(gateway: Gateway, django_db_blocker: Any) -> Iterator[Any]:
    """Writes acme's allow-list as stored, unchecked (``save`` runs no validator; its signal
    drops what every process kept of the tenant); the package's list is back after the test."""

    def store(entries: Any) -> None:
        with django_db_blocker.unblock(), schema_context(get_public_schema_name()):
            tenant = Tenant.objects.get(schema_name="acme")
            tenant.outbound_allowlist = entries
            tenant.save(update_fields=["outbound_allowlist"])

    yield store
    store([LOOPBACK])


def chat(gateway: Gateway) -> httpx.Response:
    body = {"model": gateway.openai_route, "messages": [{"role": "user", "content": "hi"}]}
    with gateway.api() as api:
        return api.post("/v1/chat/completions", json=body)


def first_answer_other_than(gateway: Gateway, status: int) -> httpx.Response:
    """The gateway's answer once it no longer answers ``status`` (the saved allow-list reached
    the server), or the last one."""
    deadline = time.monotonic() + CHANGE_WAIT_S
    while True:
        response = chat(gateway)
        if response.status_code != status or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def test_a_stored_entry_that_does_not_parse_refuses_the_call_not_a_500(
    gateway: Gateway, upstream: LoopbackUpstream, stored_allowlist: Any
) -> None:
    assert chat(gateway).status_code == 200
    before = upstream.hits
    stored_allowlist(["not a host!", 5, {"host": LOOPBACK}, [LOOPBACK], f"{LOOPBACK}:99999"])
    refused = first_answer_other_than(gateway, 200)
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert error["code"] == "upstream_error"
    assert "loopback address not in the tenant's outbound allow-list" in error["message"]
    assert upstream.hits == before  # nothing was sent


def test_a_host_port_entry_reaches_the_upstream_on_that_port_only(
    gateway: Gateway, upstream: LoopbackUpstream, stored_allowlist: Any
) -> None:
    port = upstream.server.server_address[1]
    stored_allowlist([f"{LOOPBACK}:{port + 1}"])
    refused = first_answer_other_than(gateway, 200)
    assert refused.status_code == 502, refused.text
    assert f"on port {port} refused" in refused.json()["error"]["message"]
    stored_allowlist([f"{LOOPBACK}:{port}"])
    answered = first_answer_other_than(gateway, 502)
    assert answered.status_code == 200, answered.text
