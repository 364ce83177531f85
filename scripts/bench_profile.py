"""Section "request_profile": where a request's time goes, before issue 15's changes and now.

For ``GET /healthz``, an API path no view answers (the stack in front of the views: every
middleware and the key's lookup, then Django's 404), the demo route's ``POST /api/v1/resolve``
and a gateway call on a route without sources through the loopback upstream, one
server process (uvicorn, httptools + uvloop) serves first the code of ``BEFORE`` (extracted from
git with ``git archive``, same virtualenv, same database) and then the working tree, each under
``wrk -t2 -c32`` while py-spy samples every thread of the server 250 times a second.

Each sample is charged to the component of its innermost frame (the database driver, the ORM,
Django's request handling, DRF, thread hops and thread start/join, the server and event loop,
outbound HTTP, logging, metrics, validation, JSON, the platform's own code). Samples of threads that
wait for work (an executor thread idle on its queue, the event loop in ``select``, the replay
writer and the configuration listener waiting) are left out: the shares are of the time the
process was doing something. Requests/s of each run sit beside them, measured in the same run.

``BENCH_ONLY=request_profile make bench`` runs it alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_gateway import (
    clean_tenant,
    ensure_wrk,
    prepare_tenant,
    running,
    running_upstream,
)
from scripts.bench_http import HOST
from scripts.bench_server import free_port
from scripts.bench_setup import ROOT, log
from scripts.bench_wrk import (
    FOLDER,
    GATEWAY,
    HEALTHZ,
    PLATFORM_APP,
    RESOLVE,
    UVICORN,
    Request,
    requests_for,
    run_wrk,
)

BEFORE = "7668f06"  # the last commit before issue 15
# The stack in front of the views: an API path with a key that no view answers (Django's 404 in
# the envelope), so every middleware and the key's lookup run and nothing else. Now that /healthz
# is answered in front of Django, this is what it measured before.
STACK = "stack"
TARGETS = (HEALTHZ, STACK, RESOLVE, GATEWAY)
LOAD_S = 14.0
SAMPLE_AFTER_S = 3.0  # wrk's first seconds warm the caches; sampling starts after them
SAMPLE_S = 9.0
RATE = 250
STARTUP_TIMEOUT_S = 120.0

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")

# Innermost frames of threads waiting for work: not the request's time.
IDLE = (
    ("_worker", "concurrent/futures/thread.py"),
    ("select", "selectors.py"),
    ("get", "queue.py"),
    ("wait", "threading.py"),
    ("notifies", "psycopg/connection.py"),
)
# (component, file prefixes of its innermost frame), first match wins.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("PostgreSQL (waiting, driver)", ("psycopg/", "psycopg_pool/")),
    ("ORM (building queries, rows)", ("django/db/",)),
    ("DRF", ("rest_framework/",)),
    ("Django request handling", ("django/",)),
    (
        "thread hops, thread start/join",
        ("asgiref/", "concurrent/futures/", "threading.py", "_weakrefset.py"),
    ),
    ("server and event loop", ("uvicorn/", "asyncio/", "httptools/", "uvloop/", "selectors.py")),
    (
        "outbound HTTP",
        ("httpx/", "httpcore/", "anyio/", "h11/", "aiohttp/", "yarl/", "multidict/", "ssl.py"),
    ),
    ("logging", ("logging/", "pythonjsonlogger/")),
    ("metrics", ("prometheus_client/", "django_prometheus/")),
    ("validation (pydantic)", ("pydantic/", "pydantic_core/")),
    ("JSON", ("json/", "orjson/")),
    (
        "the platform's code",
        ("contextplatform/", "sources/", "memory/", "compression/", "tenants/", "scripts/"),
    ),
)
OTHER = "other"


def component_of(frames: list[str]) -> str | None:
    """The component of a sample (its frames, outermost first); None for an idle thread."""
    if not frames:
        return None
    leaf = FRAME.match(frames[-1])
    if leaf is None:
        return OTHER
    function, file = leaf["function"], leaf["file"]
    if any(
        function == idle_function and file.endswith(idle_file) for idle_function, idle_file in IDLE
    ):
        return None
    for name, prefixes in COMPONENTS:
        if any(file.startswith(prefix) or f"/{prefix}" in file for prefix in prefixes):
            return name
    return OTHER


def shares(raw: str) -> tuple[Counter[str], int]:
    """Active samples per component of a py-spy ``raw`` profile, and their total."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        component = component_of(stack.split(";"))
        if component is not None:
            counts[component] += int(count)
    return counts, sum(counts.values())


@dataclass(frozen=True)
class Address:
    base_url: str  # what run_wrk reads of a server


@dataclass
class ProfiledRun:
    code: str  # "before" or "now"
    target: str
    requests_per_s: float
    p99_ms: float
    errors: int
    samples: int
    components: dict[str, int] = field(default_factory=dict)
    sampler_output: str = ""  # the end of what py-spy printed (its reason when it took no samples)

    def share(self, component: str) -> float:
        return self.components.get(component, 0) / self.samples if self.samples else 0.0


@dataclass
class ProfileResults:
    date: str
    before: str
    runs: list[ProfiledRun] = field(default_factory=list)
    load_average_start: str = ""
    load_average_end: str = ""
    problems: list[str] = field(default_factory=list)
    runtime_s: float = 0.0

    def run(self, code: str, target: str) -> ProfiledRun | None:
        return next((r for r in self.runs if r.code == code and r.target == target), None)


def extract_before(folder: Path, commit: str = BEFORE) -> Path:
    """The code of ``commit`` in ``folder`` (replaced), as git has it."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryFile() as handle:
        handle.write(archive)
        handle.seek(0)
        with tarfile.open(fileobj=handle) as tar:
            tar.extractall(folder, filter="data")
    return folder


def database_url() -> str:
    """The running embedded database, for a server started from another folder (whose own
    default would be a database of its own)."""
    from django.db import connection

    settings = connection.settings_dict
    host = settings["HOST"]
    if not host or host.startswith("/"):
        return f"postgresql://{settings['USER']}:@/{settings['NAME']}?host={host}"
    return f"postgresql://{settings['USER']}:@{host}:{settings['PORT']}/{settings['NAME']}"


def server_command(port: int) -> list[str]:
    """One uvicorn process on httptools and uvloop, as the http_path section serves it."""
    return UVICORN.command(PLATFORM_APP, port, 1)


def py_spy() -> str | None:
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def profile_run(
    wrk: str, spy: str, code: str, folder: Path, target: str, request: Any, env: dict[str, str]
) -> ProfiledRun:
    port = free_port()
    raw_path = FOLDER / f"profile-{code}-{target}.txt"
    with running(f"profile-{code}", server_command(port), env, "/healthz", port, folder) as server:
        with subprocess.Popen(
            [wrk, "-t2", "-c32", "-d2s", f"http://{HOST}:{port}/healthz"],
            stdout=subprocess.DEVNULL,
        ) as warm:
            warm.wait(timeout=60)

        sampler: list[subprocess.CompletedProcess[str]] = []

        def sample() -> None:
            time.sleep(SAMPLE_AFTER_S)
            command = [spy, "record", "--pid", str(server.process.pid), "--rate", str(RATE)]
            command += ["--duration", f"{SAMPLE_S:g}", "--format", "raw"]
            command += ["--output", str(raw_path), "--nonblocking"]
            sampler.append(
                subprocess.run(
                    command, capture_output=True, text=True, timeout=SAMPLE_S + 60, check=False
                )
            )

        spying = threading.Thread(target=sample)
        spying.start()
        summary = run_wrk(
            wrk, Address(f"http://{HOST}:{port}"), request, f"profile-{code}-{target}", LOAD_S
        )  # type: ignore[arg-type]
        spying.join()
    counts, total = shares(
        # py-spy may print a frame of a half-written stack as bytes that are not UTF-8
        raw_path.read_text(errors="replace") if raw_path.exists() else ""
    )
    if summary is None:
        raise RuntimeError(f"wrk printed no summary for {code} {target}")
    seconds = summary["duration_us"] / 1e6
    errors = sum(summary[k] for k in ("connect", "read", "write", "status", "timeout"))
    return ProfiledRun(
        code=code,
        target=target,
        requests_per_s=summary["requests"] / seconds if seconds else 0.0,
        p99_ms=summary["percentiles_us"].get("99", 0) / 1000,
        errors=errors,
        samples=total,
        components=dict(counts),
        sampler_output=" ".join((sampler[0].stderr if sampler else "").split())[-300:],
    )


SAMPLING_ATTEMPTS = 2


def sampled_run(
    wrk: str,
    spy: str,
    code: str,
    folder: Path,
    target: str,
    request: Any,
    env: dict[str, str],
    results: ProfileResults,
) -> ProfiledRun:
    """A profiled run, run again when py-spy took no samples of it (it sometimes fails to attach
    to a busy process); a run still without samples is noted, never shown as an empty profile."""
    for attempt in range(1, SAMPLING_ATTEMPTS + 1):
        log(f"request_profile: {target} on {code} …")
        run = profile_run(wrk, spy, code, folder, target, request, env)
        if run.samples:
            return run
        log(f"request_profile: py-spy took no samples (attempt {attempt}): {run.sampler_output}")
    results.problems.append(
        f"py-spy took no samples of {target} on {code} in {SAMPLING_ATTEMPTS} attempts: "
        f"{run.sampler_output or 'no message'}"
    )
    return run


def run_profile(quick: bool) -> ProfileResults:
    started = time.perf_counter()
    results = ProfileResults(date=utc_now(), before=BEFORE, load_average_start=load_average())
    wrk, spy = ensure_wrk(), py_spy()
    if wrk is None or spy is None:
        results.problems.append("wrk or py-spy is missing")
        return results
    FOLDER.mkdir(parents=True, exist_ok=True)
    before = extract_before(ROOT / "var" / "bench" / "profile-before")
    env = {**os.environ, "DATABASE_URL": database_url()}
    env.pop("REDIS_URL", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    upstream_port = free_port()
    prepared = None
    try:
        with running_upstream(upstream_port, dict(os.environ)):
            prepared = prepare_tenant(upstream_port)
            requests = requests_for(prepared.key)
            requests[STACK] = Request(
                "/api/v1/no-such-endpoint", headers={"Authorization": f"Bearer {prepared.key}"}
            )
            for target in TARGETS:
                for code, folder in (("before", before), ("now", ROOT)):
                    results.runs.append(
                        sampled_run(wrk, spy, code, folder, target, requests[target], env, results)
                    )
    finally:
        clean_tenant(prepared)
        for written in FOLDER.glob("wrk-profile-*.lua"):
            with contextlib.suppress(OSError):
                written.unlink()  # they hold the run's key
        shutil.rmtree(before, ignore_errors=True)
    results.load_average_end = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
