"""A real uvicorn server on loopback: tenants stay apart under concurrent load on pooled connections."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from tests.conftest import TENANT_KEYS

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def live_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    settings = connection.settings_dict
    url = f"postgresql://{settings['USER']}:{settings['PASSWORD']}@/{settings['NAME']}?host={settings['HOST']}"
    if settings["HOST"] and not settings["HOST"].startswith("/"):
        url = f"postgresql://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "DB_POOL_MAX_SIZE": "4"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "contextplatform.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            server.terminate()
            pytest.fail(f"uvicorn did not start: {server.communicate(timeout=10)[1][-2000:]}")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)


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
