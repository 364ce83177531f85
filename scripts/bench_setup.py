"""Set-up shared by the benchmark sections: Django, migrations, the demo key, the bench tenant."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_TENANT = "bench"
DEMO_TENANT = "demo"
SOURCE_COUNT = 6
TOTAL_ITEMS = 100


def manage(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    """Run ``manage.py`` in a subprocess (as ``make run`` does) and return its stdout; ``cwd``:
    another commit's code, extracted; ``env``: the subprocess' environment (default: ours)."""
    completed = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{completed.stderr[-4000:]}")
    return completed.stdout


def prepare_database() -> str:
    """Migrate every schema and refresh the demo tenant; return the demo API key."""
    manage("migrate_schemas", "--noinput", "-v", "0")
    output = manage("bootstrap_demo")
    for line in output.splitlines():
        if line.startswith("API key"):
            return line.split()[-1]
    raise RuntimeError(f"bootstrap_demo printed no 'API key' line:\n{output}")


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")
    import django

    django.setup()
    silence_console_logs()


def silence_console_logs() -> None:
    """Keep the JSON log lines (their formatting cost is real) but send them to /dev/null."""
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)


def log(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def ensure_tenant(name: str) -> None:
    from tenants.models import Tenant
    from tenants.services import create_tenant

    if Tenant.objects.filter(schema_name=name).exists():
        return
    with contextlib.redirect_stdout(io.StringIO()):
        create_tenant(name=name)


def split_items(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


def bench_route(name: str, sleeps_ms: list[float]) -> dict[str, Any]:
    """A route of ``len(sleeps_ms)`` bench sources holding ``TOTAL_ITEMS`` items between them."""
    priorities = [100, 90, 80, 60, 40, 20]
    sources = [
        {
            "type": "bench_static",
            "name": f"src{index}",
            "priority": priorities[index % len(priorities)],
            "timeout_ms": 5000,
            "items": items,
            "sleep_ms": sleep,
        }
        for index, (items, sleep) in enumerate(
            zip(split_items(TOTAL_ITEMS, len(sleeps_ms)), sleeps_ms, strict=True)
        )
    ]
    return {
        "name": name,
        "description": "Benchmark route (make bench).",
        "model": {"name": "bench", "context_window": 128000, "max_output_tokens": 1024},
        "context": {
            "sources": sources,
            # Tight enough that packing drops part of the candidates.
            "budget": {"max_tokens": "auto", "context_tokens": 6000},
            "injection": {"mode": "tool_role"},
        },
    }


def save_routes(routes: list[dict[str, Any]]) -> None:
    from django_tenants.utils import schema_context

    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.services import upsert_route

    with schema_context(BENCH_TENANT):
        for route in routes:
            upsert_route(spec=validate_route_spec(route))


def clear_bench_replay() -> int:
    """Start each run from an empty replay table in the bench tenant, so runs are comparable."""
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER

    REPLAY_WRITER.flush()
    with schema_context(BENCH_TENANT):
        deleted, _ = ReplayRecord.objects.all().delete()
    return deleted


def delete_replay(schema: str, ids: list[str]) -> int:
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER

    REPLAY_WRITER.flush()
    deleted = 0
    with schema_context(schema):
        for start in range(0, len(ids), 500):
            count, _ = ReplayRecord.objects.filter(pk__in=ids[start : start + 500]).delete()
            deleted += count
    return deleted


def git_show(commit: str, path: str) -> str:
    """``path`` as it was at ``commit``."""
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def load_source(name: str, source: str, filename: str) -> types.ModuleType:
    """``source`` run as a module of its own, ``name``, beside today's code."""
    module = types.ModuleType(name)
    sys.modules[name] = module  # its dataclasses look their module up there
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def module_at(commit: str, path: str, name: str) -> types.ModuleType:
    """The module at ``path`` as ``commit`` had it (``git show``), loaded as ``name``: an earlier
    code measured in the same process as today's."""
    return load_source(name, git_show(commit, path), f"{commit}:{path}")


def demo_tenant(section: str) -> Any:
    """The demo tenant, ``bootstrap_demo`` run first when it is missing."""
    from tenants.models import Tenant

    if not Tenant.objects.filter(schema_name=DEMO_TENANT).exists():
        log(f"{section}: bootstrap_demo …")
        manage("bootstrap_demo")
    return Tenant.objects.get(schema_name=DEMO_TENANT)


def ensure_demo_documents(section: str) -> None:
    """The demo collection's chunks: with ``REDIS_URL`` and no Celery worker the ingestion job
    ``bootstrap_demo`` queued never ran, so the bench runs it here."""
    from sources.embedding import get_embedder
    from sources.ingestion import run_ingestion_job
    from sources.models import Chunk, IngestionJob

    if Chunk.objects.exists():
        return
    job = IngestionJob.objects.order_by("-created_at").first()
    if job is not None:
        log(f"{section}: running the demo's ingestion job {job.id} inline …")
        run_ingestion_job(job.id, get_embedder())


def copy_demo_session(session: str) -> None:
    """The demo's chat session (``s_9`` of ``u_123``) written afresh as ``session``, in the
    current schema."""
    from sources.models import ChatSession
    from sources.selectors import session_messages
    from sources.services import append_session_messages

    ChatSession.objects.filter(key=session).delete()
    demo = session_messages(session_key="s_9", user_id="u_123")
    append_session_messages(
        session_key=session,
        user_id="u_123",
        messages=[{"role": m.role, "content": m.content} for m in demo],
    )
