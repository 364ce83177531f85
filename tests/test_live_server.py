"""A real uvicorn server on loopback: tenants stay apart under concurrent load on pooled connections."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import TENANT_KEYS
from tests.live import live_server


@pytest.fixture(scope="module")
def live_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    with live_server() as base:
        yield base


def route(secret: str) -> dict[str, Any]:
    return {
        "name": "live",
        "context": {
            "sources": [{"type": "skill_guardrails", "texts": [secret]}],
            "injection": {"mode": "system_prompt"},
        },
    }


async def resolve_many(base: str, keys: list[str]) -> list[httpx.Response]:
    body = {
        "route": "live",
        "user": "u1",
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        return await asyncio.gather(
            *(
                client.post("/api/v1/resolve", json=body, headers={"Authorization": f"Bearer {k}"})
                for k in keys
            )
        )


def test_concurrent_resolves_of_two_tenants_never_mix(live_url: str) -> None:
    secrets = {"acme": "ACME-ONLY-GUARDRAIL", "globex": "GLOBEX-ONLY-GUARDRAIL"}
    with httpx.Client(base_url=live_url, timeout=30) as client:
        for name, secret in secrets.items():
            headers = {"Authorization": f"Bearer {TENANT_KEYS[name]}"}
            client.delete("/api/v1/routes/live", headers=headers)
            assert (
                client.post("/api/v1/routes", json=route(secret), headers=headers).status_code
                == 201
            )
        try:
            order = ["acme", "globex"] * 40
            responses = asyncio.run(resolve_many(live_url, [TENANT_KEYS[name] for name in order]))
            for name, response in zip(order, responses, strict=True):
                assert response.status_code == 200, response.text
                system = response.json()["request"]["messages"][0]["content"]
                other = "globex" if name == "acme" else "acme"
                assert secrets[name] in system
                assert secrets[other] not in system
        finally:
            for name in secrets:
                client.delete(
                    "/api/v1/routes/live", headers={"Authorization": f"Bearer {TENANT_KEYS[name]}"}
                )
                client.get("/healthz")


def test_live_errors_are_json_envelopes(live_url: str) -> None:
    response = httpx.post(
        f"{live_url}/api/v1/resolve",
        content=b"{not json",
        timeout=10,
        headers={"Authorization": f"Bearer {TENANT_KEYS['acme']}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert (
        httpx.get(f"{live_url}/api/v1/replay", timeout=10).json()["error"]["code"] == "unauthorized"
    )
