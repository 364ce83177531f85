"""Starting, waiting for and stopping the servers the benchmarks measure.

Every section that runs a server in a process of its own (uvicorn, gunicorn, a loopback peer)
takes its port, its readiness wait and its stop from here, so that all of them wait and stop the
same way.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

LOOPBACK = "127.0.0.1"
TERMINATE_WAIT_S = 20.0
KILL_WAIT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout_s: float) -> None:
    """Until something listens on ``port``; an error as soon as ``process`` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout_s:g} s")


def healthz_answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_workers_ready(
    process: subprocess.Popen[bytes],
    log_path: Path,
    ready_line: str,
    workers: int,
    base_url: str,
    *,
    name: str,
    timeout_s: float,
) -> None:
    """Every worker has written ``ready_line`` to the log and the health endpoint answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited early; see {log_path}")
        started = log_path.read_text(errors="replace").count(ready_line)
        if started >= workers and healthz_answers(base_url):
            return
        time.sleep(0.25)
    raise RuntimeError(f"{name} not ready after {timeout_s:.0f} s; see {log_path}")


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM; SIGKILL if the process has not exited in time."""
    process.terminate()
    try:
        process.wait(timeout=TERMINATE_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=KILL_WAIT_S)


@contextmanager
def running_module(
    module: str,
    args: list[str],
    log_path: Path,
    what: str,
    timeout_s: float,
    cwd: Path,
) -> Iterator[int]:
    """``python -m <module> <args> PORT`` on a free loopback port (its output in ``log_path``),
    yielding the port once it listens; stopped when the block ends."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args, str(port)],
            cwd=cwd,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, process, what, timeout_s)
            yield port
        finally:
            terminate(process)
