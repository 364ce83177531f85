"""Real processes for tests: uvicorn and a Celery worker on the test database, on loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.db import connection

from contextplatform.celery import solo_worker_command

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database this pytest run uses, for processes it starts."""
    settings = connection.settings_dict
    user, password, name = settings["USER"], settings["PASSWORD"], settings["NAME"]
    host = settings["HOST"]
    if not host or host.startswith("/"):
        return f"postgresql://{user}:{password}@/{name}?host={host}"
    return f"postgresql://{user}:{password}@{host}:{settings['PORT']}/{name}"


@contextmanager
def running(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def live_server(env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "uvicorn",
        "contextplatform.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
    ]
    environment = {"DATABASE_URL": test_database_url(), "DB_POOL_MAX_SIZE": "4", **(env or {})}
    with running(args, environment) as server:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            if server.poll() is not None:
                pytest.fail(
                    f"uvicorn exited: {server.stderr.read()[-2000:] if server.stderr else ''}"
                )
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            pytest.fail("uvicorn did not answer /healthz")
        yield base


@contextmanager
def celery_worker(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    args = solo_worker_command()
    environment = {"DATABASE_URL": test_database_url(), "DB_POOL_MAX_SIZE": "0", **env}
    with running(args, environment) as worker:
        yield worker
