"""The server ``make run`` starts (the Makefile's ``run`` target, its ``exec`` line as written) with
several workers: the lifespan answered in each, HTTP on fresh connections, the live stream's
WebSocket through Channels (accepted with a key, closed 4401 without), request headers capped
(431), and a clean exit on SIGTERM.
The numbers that picked it are in docs/benchmarks.md (``BENCH_ONLY=http_path make bench``)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests import live
from tests.conftest import TENANT_KEYS

MAKEFILE = live.ROOT / "Makefile"
WORKERS = 2


def run_command(port: int, workers: int) -> list[str]:
    """The ``exec`` line of ``make run``, its make variables filled in."""
    text = MAKEFILE.read_text(encoding="utf-8")
    recipe = text.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    line = next(row.strip() for row in recipe.splitlines() if row.strip().startswith("exec "))
    values = {
        "BIN": str(Path(sys.executable).parent),
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": str(workers),
    }
    filled = re.sub(r"\$\((\w+)\)", lambda match: values[match.group(1)], line)
    return shlex.split(filled)[1:]  # without the shell's exec


def wait_for(base: str, server: subprocess.Popen[str]) -> None:
    for _ in range(600):
        assert server.poll() is None, server.stderr.read()[-3000:] if server.stderr else ""
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("the server did not answer /healthz")


async def socket_outcomes(url: str, key: str) -> tuple[str, int | None]:
    """An authenticated socket stays open; one without a key is closed with 4401."""
    import websockets
    from websockets.exceptions import ConnectionClosed

    headers = {"Authorization": f"Bearer {key}"}
    async with websockets.connect(url, additional_headers=headers, open_timeout=10) as ws:
        try:
            await asyncio.wait_for(ws.recv(), timeout=1.0)
            opened = "frame"
        except TimeoutError:
            opened = "open"
        except ConnectionClosed:
            opened = "closed"
    async with websockets.connect(url, open_timeout=10) as ws:
        try:
            await asyncio.wait_for(ws.recv(), timeout=10)
        except ConnectionClosed as closed:
            return opened, closed.rcvd.code if closed.rcvd else None
    return opened, None


def test_make_runs_server_serves_http_websockets_and_stops_cleanly(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    command = run_command(port, WORKERS)
    with django_db_blocker.unblock():
        database = live.test_database_url()
    with tempfile.TemporaryDirectory() as metrics:
        environment = {
            "DATABASE_URL": database,
            "DB_POOL_MAX_SIZE": "4",
            "PROMETHEUS_MULTIPROC_DIR": metrics,  # as `make run` sets it for several workers
        }
        server = subprocess.Popen(
            command,
            cwd=live.ROOT,
            env={**os.environ, **environment},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(base, server)
            answers = []
            for _ in range(8):  # each on a connection of its own: every worker gets some
                with httpx.Client(base_url=base, timeout=10) as client:
                    answers.append(client.get("/healthz").json())
            url = base.replace("http://", "ws://") + "/ws/metrics/"
            outcomes = asyncio.run(socket_outcomes(url, TENANT_KEYS["acme"]))
            metrics_page = httpx.get(f"{base}/metrics", timeout=10)
            # Headers over API_MAX_HEADER_BYTES (64 KiB): the worker class caps them.
            long_head = httpx.get(f"{base}/healthz", headers={"X-Long": "a" * 100_000}, timeout=10)
        finally:
            server.terminate()
            try:
                code = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
                code = None
        log = server.stderr.read() if server.stderr else ""
    assert answers == [{"status": "ok"}] * 8
    assert outcomes == ("open", 4401)
    assert metrics_page.status_code == 200
    assert long_head.status_code == 431
    assert code == 0, log[-3000:]
    assert log.count("Application startup complete") == WORKERS, log[-3000:]
    assert log.count("Application shutdown complete") == WORKERS, log[-3000:]
    assert "lifespan" not in log.lower(), log[-3000:]
