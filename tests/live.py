"""Real processes for tests: uvicorn and a Celery worker on the test database, on loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
import pytest
from django.db import connection

from contextplatform.celery import solo_worker_command

ROOT = Path(__file__).resolve().parent.parent
# uvicorn on the protocol every server of the project runs (the request head's cap included).
SERVER_PROTOCOL = ["--http", "contextplatform.server:HeadLimitedHttpToolsProtocol"]


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


def uvicorn_command(port: int, *, access_log: bool = False) -> list[str]:
    """uvicorn serving the project on loopback, as every server of the project runs it; its access
    log (a line per request) off unless asked for."""
    args = [
        sys.executable,
        "-m",
        "uvicorn",
        "contextplatform.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_PROTOCOL,
    ]
    return args if access_log else [*args, "--no-access-log"]


@contextmanager
def running(
    args: list[str],
    env: dict[str, str],
    *,
    stdout: int | IO[str] = subprocess.DEVNULL,
    stderr: int | IO[str] = subprocess.PIPE,
) -> Iterator[subprocess.Popen[str]]:
    """The process in the repository's folder, the test's environment with ``env`` over it;
    stopped on leaving (killed if it has not exited 20 s after SIGTERM)."""
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=stdout,
        stderr=stderr,
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


def drained(process: subprocess.Popen[str]) -> Callable[[], str]:
    """Read the process's stderr as it is written, keeping its last lines: a pipe nobody reads
    fills up (64 KiB of log lines, a few hundred refused requests), and the server then blocks on
    its next log line, every request after that left hanging. The returned function gives the
    kept tail (after the process exits, once the pipe is read to its end)."""
    lines: deque[str] = deque(maxlen=200)

    def drain() -> None:
        if process.stderr is not None:
            for line in process.stderr:
                lines.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def tail() -> str:
        if process.poll() is not None:
            reader.join(timeout=5)
        return "".join(lines)[-2000:]

    return tail


@contextmanager
def live_server(env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    args = uvicorn_command(port)
    # Tasks run inline in the server, as in the test process (tests/conftest.py), also where
    # REDIS_URL names a broker (CI): no worker is listening unless a test starts one and says so
    # with CELERY_TASK_ALWAYS_EAGER=0.
    environment = {
        "DATABASE_URL": test_database_url(),
        "DB_POOL_MAX_SIZE": "4",
        "CELERY_TASK_ALWAYS_EAGER": "1",
        **(env or {}),
    }
    with running(args, environment) as server:
        log_tail = drained(server)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            if server.poll() is not None:
                pytest.fail(f"uvicorn exited: {log_tail()}")
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
