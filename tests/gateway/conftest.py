"""The gateway against a real uvicorn (``tests.live.live_server``) on the test database and the
loopback upstream (``tests.upstream``), driven by the official ``openai`` and ``anthropic``
clients as an application would.

The server is another process, so what a test sets up is committed: the tenant's outbound
allow-list (the upstream listens on loopback) through the ORM, deployments and routes through the
HTTP API; all of it is removed when the package's tests end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import TENANT_KEYS
from tests.live import live_server
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.upstream import LoopbackUpstream, running_upstream

OPENAI_KEY = "sk-upstream-openai-" + "7" * 24
ANTHROPIC_KEY = "sk-ant-upstream-" + "8" * 24
RULE = "GATEWAY-RULE: answer kindly."
HANG_TIMEOUT_MS = 500


@dataclass(frozen=True)
class Gateway:
    """The live server, the upstream and the names the package's tests share."""

    server: str
    upstream: LoopbackUpstream
    key: str
    openai_route: str
    anthropic_route: str
    hanging_route: str

    @property
    def openai_base_url(self) -> str:
        return f"{self.server}/v1"

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.server, timeout=30, headers={"Authorization": f"Bearer {self.key}"}
        )

    def replay(self, resolve_id: str) -> dict[str, Any]:
        with self.api() as api:
            response = api.get(f"/api/v1/replay/{resolve_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def upstream_of(self, route: str) -> str:
        """The deployment a route forwards to."""
        with self.api() as api:
            response = api.get(f"/api/v1/routes/{route}")
        assert response.status_code == 200, response.text
        return str(response.json()["model"]["upstream"])

    def session(self, session: str, user: str) -> list[dict[str, Any]]:
        with self.api() as api:
            response = api.get(f"/api/v1/sessions/{session}/messages", params={"user": user})
        assert response.status_code == 200, response.text
        return list(response.json()["data"])


def _created(api: httpx.Client, path: str, body: dict[str, Any]) -> None:
    response = api.post(path, json=body)
    assert response.status_code == 201, response.text


@pytest.fixture(scope="package")
def gateway(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Gateway]:
    suffix = uuid.uuid4().hex[:8]
    with (
        running_upstream() as upstream,
        django_db_blocker.unblock(),
        outbound_allowlist("acme", [LOOPBACK]),
        live_server() as server,
    ):
        gateway = Gateway(
            server=server,
            upstream=upstream,
            key=TENANT_KEYS["acme"],
            openai_route=f"gw-openai-{suffix}",
            anthropic_route=f"gw-anthropic-{suffix}",
            hanging_route=f"gw-hang-{suffix}",
        )
        deployments = [
            {
                "name": f"loop-openai-{suffix}",
                "protocol": "openai",
                "base_url": upstream.openai_base_url,
                "model": "upstream-gpt",
                "api_key": OPENAI_KEY,
            },
            {
                "name": f"loop-anthropic-{suffix}",
                "protocol": "anthropic",
                "base_url": upstream.anthropic_base_url,
                "model": "upstream-claude",
                "api_key": ANTHROPIC_KEY,
            },
            {
                "name": f"loop-hang-{suffix}",
                "protocol": "openai",
                "base_url": upstream.openai_base_url,
                "model": "upstream-gpt",
                "api_key": OPENAI_KEY,
                "timeout_ms": HANG_TIMEOUT_MS,
            },
        ]
        rules = {"type": "skill_guardrails", "name": "rules", "texts": [RULE]}
        routes = [
            (gateway.openai_route, deployments[0]["name"]),
            (gateway.anthropic_route, deployments[1]["name"]),
            (gateway.hanging_route, deployments[2]["name"]),
        ]
        with gateway.api() as api:
            for deployment in deployments:
                _created(api, "/api/v1/deployments", deployment)
            for route, deployment_name in routes:
                body = {
                    "name": route,
                    "model": {"upstream": deployment_name},
                    "context": {"sources": [rules]},
                }
                _created(api, "/api/v1/routes", body)
            try:
                yield gateway
            finally:
                for route, _ in routes:
                    api.delete(f"/api/v1/routes/{route}")
                for deployment in deployments:
                    api.delete(f"/api/v1/deployments/{deployment['name']}")


@pytest.fixture
def upstream(gateway: Gateway) -> Iterator[LoopbackUpstream]:
    """The shared upstream, answering normally at the start of each test."""
    gateway.upstream.behave()
    gateway.upstream.disconnected.clear()
    yield gateway.upstream
    gateway.upstream.behave()


@pytest.fixture
def spend(django_db_blocker: Any) -> Any:
    """(spent, reserved) of a session of acme's, as the server committed it."""
    from django_tenants.utils import schema_context

    from contextplatform.gateway.models import SessionSpend

    def read(session: str, user: str = "") -> tuple[int, int]:
        with django_db_blocker.unblock(), schema_context("acme"):
            row = (
                SessionSpend.objects.filter(session_key=session, user_id=user)
                .values_list("spent", "reserved")
                .first()
            )
        return row or (0, 0)

    return read


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
