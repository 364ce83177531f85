"""No API key in any line the server writes: uvicorn with its access log on, then the server
``make run`` starts (gunicorn with uvicorn workers), each sent the requests a client makes with a
key (resolve with ``Bearer``, the gateway with ``x-api-key``, the live stream's socket with
``?key=``, a key that is no key, a path that does not exist with ``?api_key=``), and every line of
its standard output and error searched for each key and the secret part of each."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import live
from tests.conftest import TENANT_KEYS
from tests.test_production_server import run_command, wait_for


async def open_socket(url: str) -> None:
    import websockets
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    try:
        async with websockets.connect(url, open_timeout=10) as ws:
            await asyncio.wait_for(ws.recv(), timeout=1.0)
    except (TimeoutError, ConnectionClosed, InvalidStatus):
        pass


def send_requests_with_keys(base: str, key: str, bad_key: str) -> None:
    chat = {"model": "any", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    resolve = {"route": "none", "request": {"messages": [{"role": "user", "content": "hi"}]}}
    with httpx.Client(base_url=base, timeout=30) as client:
        for presented in (key, bad_key):
            client.post(
                "/api/v1/resolve", json=resolve, headers={"Authorization": f"Bearer {presented}"}
            )
            client.post("/v1/messages", json=chat, headers={"x-api-key": presented})
            client.get(f"/api/v1/routes?key={presented}")
            client.get(f"/no/such/path?page=1&api_key={presented}")
            client.get(f"/v1/models?ACCESS_TOKEN={presented}&token={presented}")
    socket = base.replace("http://", "ws://") + "/ws/metrics/"
    for presented in (key, bad_key):
        asyncio.run(open_socket(f"{socket}?key={presented}"))


def lines_showing(log: str, keys: list[str]) -> list[str]:
    """The lines of ``log`` that show a key, whole or its secret part (what follows ``cp_``)."""
    needles = [*keys, *(key.removeprefix("cp_") for key in keys)]
    return [line for line in log.splitlines() if any(needle in line for needle in needles)]


@pytest.mark.parametrize("server", ["uvicorn", "make run"])
def test_no_log_line_shows_a_key(server: str, django_db_setup: Any, django_db_blocker: Any) -> None:
    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    with django_db_blocker.unblock():
        database = live.test_database_url()
    key, bad_key = TENANT_KEYS["acme"], "cp_" + secrets.token_urlsafe(24)
    if server == "uvicorn":
        command = live.uvicorn_command(port, access_log=True)
    else:
        command = run_command(port, 2)
    with tempfile.TemporaryDirectory() as folder:
        log_file = Path(folder) / "server.log"
        environment = {
            "DATABASE_URL": database,
            "DB_POOL_MAX_SIZE": "4",
            "LOG_LEVEL": "INFO",
            "PROMETHEUS_MULTIPROC_DIR": folder,
        }
        with (
            log_file.open("w") as output,
            live.running(command, environment, stdout=output, stderr=subprocess.STDOUT) as process,
        ):
            wait_for(base, process)
            send_requests_with_keys(base, key, bad_key)
        log = log_file.read_text(encoding="utf-8")
    shown = lines_showing(log, [key, bad_key])
    assert shown == [], f"{len(shown)} of {len(log.splitlines())} lines show a key"
    # The requests were logged (the test sees the lines it searches), with their keys masked.
    assert "/ws/metrics/?key=[redacted]" in log, log[-3000:]
    if server == "uvicorn":
        assert "/no/such/path?page=1&api_key=[redacted]" in log, log[-3000:]
