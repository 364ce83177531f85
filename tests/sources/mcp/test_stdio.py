"""Stdio MCP servers come from the platform's settings (``MCP_STDIO_SERVERS``), never from a
tenant: a route names one like any server, the process gets only the environment its entry names,
and ``tenants`` limits who may name it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.sources.mcp.conftest import create_route, resolve, resources_route, source_of

SCRIPT = Path(__file__).with_name("stdio_server.py")


@pytest.fixture
def stdio_servers(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_ONLY_SECRET", "never-in-the-child")
    settings.MCP_STDIO_SERVERS = {
        "notes": {
            "command": sys.executable,
            "args": [str(SCRIPT)],
            "env": {"NOTES_GREETING": "hello"},
            "timeout_ms": 30_000,
            "tenants": ["acme"],
        }
    }


def test_a_platform_stdio_server_is_read_like_any_other(
    stdio_servers: None, acme: TenantFixture, acme_api: ApiClient
) -> None:
    create_route(
        acme_api,
        resources_route(
            "notes",
            ["notes://today", "notes://users/{user}", "notes://environment"],
            server="notes",
            timeout_ms=30_000,
        ),
    )
    report = resolve(acme_api, "notes", user="u_alice")
    source = source_of(report)
    assert source["status"] == "ok", source
    assert source["notes"]["transport"] == "stdio"
    prompt = report["request"]["messages"][0]["content"]
    assert "[Resource: notes://today] Standup at ten." in prompt
    assert "Notes for u_alice; greeting hello" in prompt
    environment = json.loads(prompt.split("[Resource: notes://environment] ", 1)[1].split("\n")[0])
    assert "NOTES_GREETING" in environment and "PLATFORM_ONLY_SECRET" not in environment
    # Nothing of the command shows in the report.
    assert "stdio_server.py" not in json.dumps(report)


def test_tenants_limits_who_may_name_a_stdio_server(
    stdio_servers: None, globex: TenantFixture, globex_api: ApiClient
) -> None:
    create_route(globex_api, resources_route("notes", ["notes://today"], server="notes"))
    source = source_of(resolve(globex_api, "notes"))
    assert source["status"] == "failed" and "no MCP server named 'notes'" in source["error"]


def test_a_tenants_own_server_of_the_same_name_comes_first(
    stdio_servers: None, acme: TenantFixture, acme_api: ApiClient
) -> None:
    response = acme_api.post(
        "/api/v1/mcp-servers", {"name": "notes", "url": "http://127.0.0.1:9/mcp"}
    )
    assert response.status_code == 201
    create_route(acme_api, resources_route("notes", ["notes://today"], server="notes"))
    source = source_of(resolve(acme_api, "notes"))
    assert source["status"] == "failed" and source["notes"]["transport"] == "http"
