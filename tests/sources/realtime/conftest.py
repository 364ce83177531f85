"""Fixtures of the ``realtime_apis`` tests: live HTTP services on loopback (``tests/loopback.py``)
and acme's outbound allow-list opened to them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Service, outbound_allowlist, running_service


@pytest.fixture
def service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture
def other_service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture
def allow_acme(acme: TenantFixture) -> Iterator[None]:
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        yield


def live_route(*connectors: dict[str, Any], name: str = "r", **source: Any) -> dict[str, Any]:
    source.setdefault("timeout_ms", 5000)
    return {
        "name": name,
        "context": {
            "sources": [
                {"type": "realtime_apis", "name": "live", "connectors": list(connectors), **source}
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def create(api: ApiClient, route: dict[str, Any]) -> None:
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def resolve(
    api: ApiClient,
    *,
    route: str = "r",
    user: str | None = "u_1",
    session: str | None = "s_1",
    question: str = "what is my balance?",
    status: int = 200,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "route": route,
        "request": {"messages": [{"role": "user", "content": question}]},
    }
    if user is not None:
        body["user"] = user
    if session is not None:
        body["session"] = session
    response = api.post("/api/v1/resolve", body)
    assert response.status_code == status, response.content
    return response.json()


def live_source(report: dict[str, Any]) -> dict[str, Any]:
    return next(source for source in report["sources"] if source["name"] == "live")


def system_prompt(report: dict[str, Any]) -> str:
    first = report["request"]["messages"][0]
    return first["content"] if first["role"] == "system" else ""
