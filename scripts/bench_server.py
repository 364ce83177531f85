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
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

LOOPBACK = "127.0.0.1"
TERMINATE_WAIT_S = 20.0
KILL_WAIT_S = 10.0


@dataclass
class ServerProcess:
    """A server the bench started: its process, port, worker count and log."""

    process: subprocess.Popen[bytes]
    port: int
    workers: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def cpu_seconds(self) -> float:
        """CPU time of the server and its worker processes so far."""
        return tree_cpu_seconds(self.process)


def process_tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of a process, its reaped children and its live descendants."""
    total = 0.0
    with suppress(psutil.Error):
        times = root.cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
        for child in root.children(recursive=True):
            with suppress(psutil.Error):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
    return total


def tree_cpu_seconds(process: subprocess.Popen[bytes]) -> float:
    try:
        return process_tree_cpu(psutil.Process(process.pid))
    except psutil.Error:
        return 0.0


def python_m(module: str, *args: str) -> list[str]:
    """``python -m <module> <args>`` with this interpreter (the virtualenv's)."""
    return [sys.executable, "-m", module, *args]


def listen_options(port: int, workers: int) -> list[str]:
    """uvicorn's and granian's options for where to listen and how many workers."""
    return ["--host", LOOPBACK, "--port", str(port), "--workers", str(workers)]


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


def wait_workers_ready(server: ServerProcess, ready_line: str, name: str, timeout_s: float) -> None:
    """Every worker has written ``ready_line`` to the log and the health endpoint answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{name} exited early; see {server.log_path}")
        started = server.log_path.read_text(errors="replace").count(ready_line)
        if started >= server.workers and healthz_answers(server.base_url):
            return
        time.sleep(0.25)
    raise RuntimeError(f"{name} not ready after {timeout_s:.0f} s; see {server.log_path}")


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
