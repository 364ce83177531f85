"""The gateway against a real uvicorn (``tests.live.live_server``) on the test database and the
loopback upstream (``tests.upstream``), driven by the official ``openai`` and ``anthropic``
clients as an application would.

The server is another process, so what a test sets up is committed: the tenant's outbound
allow-list (the upstream listens on loopback) through the ORM, deployments and routes through the
HTTP API; all of it is removed when the package's tests end."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import TENANT_KEYS
from tests.live import live_server
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.upstream import LoopbackUpstream, running_upstream

# An upper bound for a call's replay record to be written (a stream's usage after its last event),
# not a measured time.
RECORD_ARRIVAL_S = 20

OPENAI_KEY = "sk-upstream-openai-" + "7" * 24
ANTHROPIC_KEY = "sk-ant-upstream-" + "8" * 24
RULE = "GATEWAY-RULE: answer kindly."
HANG_TIMEOUT_MS = 500
# The deployment that answered a call (of the route's fallbacks, the one that did).
DEPLOYMENT_HEADER = "x-context-deployment"


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

    def recorded(self, resolve_id: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The replay record once ``ready`` holds for it, else as it is after RECORD_ARRIVAL_S.
        The replay writer writes a record after the answer left, and a stream's usage after its
        last event, so a record still missing (404) is not ready yet either."""
        deadline = time.monotonic() + RECORD_ARRIVAL_S
        while True:
            with self.api() as api:
                response = api.get(f"/api/v1/replay/{resolve_id}")
            if response.status_code == 200 and ready(record := dict(response.json())):
                return record
            if time.monotonic() > deadline:
                assert response.status_code == 200, response.text
                return record
            time.sleep(0.05)

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


# ---------------------------------------------------------------- fallbacks and pools


@dataclass
class Fallbacks:
    """Deployments and routes a test makes on two loopback upstreams of its own (``first`` and
    ``second``): a route's fallbacks, or its pool. Cool-downs are kept per deployment in the
    server's process, so each test names deployments of its own; all removed after it."""

    gateway: Gateway
    first: LoopbackUpstream
    second: LoopbackUpstream
    made_deployments: list[str]
    made_routes: list[str]

    def deployment(
        self,
        base_url: str,
        timeout_ms: int = 10_000,
        protocol: str = "openai",
        model: str | None = None,
    ) -> str:
        name = unique("fb")
        body = {
            "name": name,
            "protocol": protocol,
            "base_url": base_url,
            "model": model or f"model-{name}",
            "api_key": OPENAI_KEY,
            "timeout_ms": timeout_ms,
        }
        with self.gateway.api() as api:
            response = api.post("/api/v1/deployments", json=body)
        assert response.status_code == 201, response.text
        self.made_deployments.append(name)
        return name

    def route(self, upstream: Any, context: dict[str, Any] | None = None) -> str:
        name = unique("gw-fb")
        body = {"name": name, "model": {"upstream": upstream}, "context": context or {}}
        with self.gateway.api() as api:
            response = api.post("/api/v1/routes", json=body)
        assert response.status_code == 201, response.text
        self.made_routes.append(name)
        return name

    def pair(self, first_timeout_ms: int = 10_000) -> tuple[str, str, str]:
        """A route over a deployment on ``first`` then one on ``second``: (route, first, second)."""
        one = self.deployment(self.first.openai_base_url, first_timeout_ms)
        two = self.deployment(self.second.openai_base_url)
        return self.route([one, two]), one, two

    def chat(self, route: str, **extra: Any) -> httpx.Response:
        body = {"model": route, "messages": [{"role": "user", "content": "hello"}], **extra}
        with self.gateway.api() as api:
            return api.post("/v1/chat/completions", json=body)

    def attempts(self, response: Any) -> list[dict[str, Any]]:
        tokens = self.gateway.replay(response.headers["x-context-resolve-id"])["tokens"]
        return list(tokens["attempts"])


@pytest.fixture
def fallbacks(gateway: Gateway) -> Iterator[Fallbacks]:
    with running_upstream() as first, running_upstream() as second:
        made = Fallbacks(gateway, first, second, [], [])
        try:
            yield made
        finally:
            with gateway.api() as api:
                for route in made.made_routes:
                    api.delete(f"/api/v1/routes/{route}")
                for name in made.made_deployments:
                    api.delete(f"/api/v1/deployments/{name}")


def outcomes(attempts: list[dict[str, Any]]) -> list[tuple[str, str, int | None]]:
    """A call's attempts as (deployment, outcome, status)."""
    return [(a["deployment"], a["outcome"], a.get("status")) for a in attempts]


def refused_base_url() -> str:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]
    return f"http://{LOOPBACK}:{port}/v1"


# ---------------------------------------------------------------- budgets under concurrent calls

CONCURRENT = 20  # calls sent at once against a budget
MAX_OUTPUT = 200  # each call's max_tokens: most of its worst case, little of what it spends
FITS = 5  # worst cases a budget is made to hold at once


def budget_messages() -> list[Any]:
    return [{"role": "user", "content": "How much is left of my budget?"}]


def reserved_per_call(gateway: Gateway, route: str) -> int:
    """What one call of ``route`` (a route with a session budget) reserves: its input as the
    provider counts it plus the whole ``MAX_OUTPUT``, read from its replay record. A key's budget
    asks the same of each call."""
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=route,
        messages=budget_messages(),
        max_tokens=MAX_OUTPUT,
        extra_headers={"x-session-id": unique("measure")},
    )
    held = gateway.replay(raw.headers["x-context-resolve-id"])["tokens"]["session_budget"]
    assert held["output_allowance"] == MAX_OUTPUT
    return int(held["reserved"])


def burst(
    gateway: Gateway,
    key: str,
    route: str,
    calls: int = CONCURRENT,
    headers: Mapping[str, str] | None = None,
) -> list[Any]:
    """``calls`` chat calls of ``route`` sent at once with ``key``: each one's completion, or
    the ``RateLimitError`` that refused it."""

    async def one(client: openai.AsyncOpenAI) -> Any:
        try:
            return await client.chat.completions.create(
                model=route, messages=budget_messages(), max_tokens=MAX_OUTPUT
            )
        except openai.RateLimitError as refused:
            return refused

    async def all_at_once() -> list[Any]:
        client = openai.AsyncOpenAI(
            base_url=gateway.openai_base_url,
            api_key=key,
            max_retries=0,
            default_headers=dict(headers or {}),
        )
        async with client:
            return await asyncio.gather(*(one(client) for _ in range(calls)))

    return asyncio.run(all_at_once())


def split(outcomes: list[Any], code: str) -> tuple[list[Any], list[openai.RateLimitError]]:
    """The answered calls and the refused ones, each refusal checked: 429 with ``code``."""
    refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    for error in refused:
        assert error.status_code == 429
        assert error.body["code"] == code, error.body
    return [o for o in outcomes if not isinstance(o, openai.RateLimitError)], refused
