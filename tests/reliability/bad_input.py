"""What the bad-input tests share: the envelope of a refusal checked, every row of the tenant's
schema counted (so a test can say that a refused request wrote nothing), and gateway routes to a
loopback upstream that counts what reaches the model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection

from tests.conftest import ApiClient
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.upstream import LoopbackUpstream, running_upstream

NUL = "a\x00b"
LONG = "x" * 10_000


def envelope_error(response: Any) -> dict[str, Any]:
    """The ``error`` of a REST API refusal, its shape checked."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "param"}, body
    error: dict[str, Any] = body["error"]
    return error


def provider_error(response: Any, protocol: str) -> dict[str, Any]:
    """The ``error`` of a gateway refusal in the provider's own shape."""
    body = response.json()
    if protocol == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message", "code"}, body
    else:
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    error: dict[str, Any] = body["error"]
    return error


def row_counts(schema: str) -> dict[str, int]:
    """The number of rows of every table of ``schema`` (one statement), as the test's transaction
    sees them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
            [schema],
        )
        tables = [row[0] for row in cursor.fetchall()]
        counts = " UNION ALL ".join(
            f'SELECT \'{table}\', count(*) FROM "{schema}"."{table}"' for table in tables
        )
        cursor.execute(counts)
        return {name: count for name, count in cursor.fetchall()}


@dataclass(frozen=True)
class GatewayRoutes:
    upstream: LoopbackUpstream
    names: dict[str, str]  # protocol: the route's name


@contextmanager
def routes_to_loopback(api: ApiClient, schema: str) -> Iterator[GatewayRoutes]:
    """A deployment and a route per protocol (in the test's transaction), each forwarding to a
    loopback upstream that counts what reaches it."""
    with running_upstream() as upstream, outbound_allowlist(schema, [LOOPBACK]):
        names: dict[str, str] = {}
        for protocol, base_url in (
            ("openai", upstream.openai_base_url),
            ("anthropic", upstream.anthropic_base_url),
        ):
            deployment = {
                "name": f"loop-{protocol}",
                "protocol": protocol,
                "base_url": base_url,
                "model": f"upstream-{protocol}",
                "api_key": "sk-upstream-" + "7" * 24,
            }
            assert api.post("/api/v1/deployments", deployment).status_code == 201
            route = {
                "name": f"gw-{protocol}",
                "model": {"upstream": deployment["name"]},
                "context": {"sources": []},
            }
            assert api.post("/api/v1/routes", route).status_code == 201
            names[protocol] = route["name"]
        yield GatewayRoutes(upstream, names)
