"""The scale section's measurements, run in a process of its own against a PostgreSQL of its own.

``scripts/bench_scale.py`` starts this module with ``PGSERVER_DATADIR`` naming a scratch data
folder (or ``DATABASE_URL`` naming a dedicated database) and ``REDIS_URL`` empty, so thousands of
tenants never reach the development database or the shared Redis. At each tenant count of the
run it grows the tenants to that count, each with a deployment (the bench's loopback upstream), a
route (the demo's support route with a memories source), a collection of three documents and three
memories, then measures: tenant creation through the normal path (every migration run in the new
schema) and by cloning a template schema (django-tenants' ``clone_schema`` tried once: it loses
the pgvector columns' dimensions; the clone is the template's ``pg_dump`` replayed under the new
name), the catalog's size, ``resolve`` and gateway latency over
a live uvicorn with a random tenant per request, the worker's memory after every tenant was
served, the connections and ``SET search_path`` statements per request, and ``migrate_schemas``
across every tenant, serial and in parallel, with nothing to do and with one small migration.
It writes its results as JSON to the path it is given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import random
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from scripts.bench_env import load_average
from scripts.bench_setup import ROOT, log, manage, setup_django

PREFIX = "scale_"
TEMPLATE = "scale_template"
HOST = "127.0.0.1"
DEPLOYMENT = "scale-upstream"
ROUTE = "support"
USER = "u_123"
DOCUMENTS = 3
MEMORIES = 3
CONCURRENCY = 8
MIGRATE_TIMEOUT_S = 900.0
PROBE_APP = "memory"
PROBE_MIGRATION = "9999_scale_probe"
PROBE_PATH = ROOT / PROBE_APP / "migrations" / f"{PROBE_MIGRATION}.py"
PROBE_SOURCE = '''"""Written and removed by scripts/bench_scale_run.py (never committed): one small migration."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("{app}", "{previous}")]
    operations = [
        migrations.RunSQL(
            "CREATE TABLE scale_probe (id integer PRIMARY KEY)", "DROP TABLE scale_probe"
        )
    ]
'''


@dataclass
class Step:
    """What was measured once the run had ``tenants`` tenants (the template not counted)."""

    tenants: int
    load_average: str = ""
    normal_create_s: list[float] = field(default_factory=list)
    clone_create_s: list[float] = field(default_factory=list)
    populate_s: list[float] = field(default_factory=list)
    pg_class_rows: int = 0
    pg_catalog_bytes: int = 0
    database_bytes: int = 0
    resolve_ms: list[float] = field(default_factory=list)
    gateway_ms: list[float] = field(default_factory=list)
    first_touch_ms: list[float] = field(default_factory=list)
    http_errors: dict[str, int] = field(default_factory=dict)
    rss_start_mb: float = 0.0
    rss_touched_mb: float = 0.0
    rss_after_mb: float = 0.0
    server_connections_max: int = 0
    sessions_per_request: float = 0.0
    statements_per_request: float = 0.0
    set_search_path_per_request: float = 0.0
    migrate_s: dict[str, float] = field(default_factory=dict)
    sweep_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    sizes: list[int]
    quick: bool
    normal_per_step: int
    requests: int
    processes: int
    database: str = ""
    steps: list[Step] = field(default_factory=list)
    template_create_s: float = 0.0
    django_tenants_clone_error: str = ""
    migrate_up_to: int = 0
    cloned_tenant_checked: bool = False
    runtime_s: float = 0.0


# Tenants ----------------------------------------------------------------------------------------


def quiet() -> contextlib.AbstractContextManager[Any]:
    return contextlib.redirect_stdout(io.StringIO())


def create_normal(name: str) -> tuple[Any, str]:
    from tenants.services import create_tenant

    with quiet():
        tenant, issued = create_tenant(name=name, outbound_allowlist=[HOST])
    return tenant, issued.plain_key


def clone_with_django_tenants(name: str) -> str:
    """django-tenants' ``clone_schema`` SQL function into a probe schema, dropped afterwards:
    empty when it worked, else its error's last line (it rebuilds each column's type without
    its modifier, so a pgvector column loses its dimensions and its HNSW index fails)."""
    from django.db import DatabaseError, connection, transaction
    from django_tenants.clone import CloneSchema

    try:
        with transaction.atomic():
            CloneSchema().clone_schema(TEMPLATE, name, "DATA")
            with connection.cursor() as cursor:
                cursor.execute(f'DROP SCHEMA "{name}" CASCADE')
    except DatabaseError as error:
        found = re.search(r"\d{5}\. ([^\n]+)", str(error))
        return found.group(1) if found else str(error).splitlines()[-1]
    return ""


def template_dump() -> str:
    """The template schema, tables and rows, as SQL (``pg_dump``), every psql command left out."""
    import subprocess

    from django.db import connection

    params = connection.get_connection_params()
    binary = str(pg_binary("pg_dump"))  # the server's own version
    dumped = subprocess.run(
        [
            binary,
            "--schema",
            TEMPLATE,
            "--inserts",
            "--no-owner",
            "--no-privileges",
            "--host",
            str(params.get("host", "")),
            "--port",
            str(params.get("port", "")),
            "--username",
            str(params.get("user", "")),
            str(params.get("dbname", "")),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PGPASSWORD": str(params.get("password", ""))},
    )
    if dumped.returncode:
        raise RuntimeError(f"pg_dump of the template failed: {dumped.stderr[-2000:]}")
    return "\n".join(line for line in dumped.stdout.splitlines() if not line.startswith("\\"))


def pg_binary(name: str) -> Path:
    """``name`` beside the running embedded server's own binaries (the wheel also carries an
    older client), else from the PATH (a server from ``DATABASE_URL``)."""
    import shutil

    log_path = server_log()
    if log_path is not None:
        pid = int((log_path.parent / "postmaster.pid").read_text().split()[0])
        return Path(psutil.Process(pid).exe()).parent / name
    return Path(shutil.which(name) or name)


def create_cloned(name: str, dump: str) -> tuple[Any, str]:
    """``create_tenant``'s rows, its schema made by replaying the template's dump under the new
    name (tables, indexes with their exact types, and the rows that record its migrations)."""
    from django.db import connection, transaction

    from tenants.models import Domain, Tenant
    from tenants.services import issue_api_key

    script = dump.replace(f"{TEMPLATE}.", f"{name}.").replace(
        f"SCHEMA {TEMPLATE};", f"SCHEMA {name};"
    )
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(script)
            cursor.execute("SELECT pg_catalog.set_config('search_path', 'public', false)")
        connection.set_schema_to_public()
        tenant = Tenant(schema_name=name, name=name, outbound_allowlist=[HOST])
        tenant.auto_create_schema = False  # the schema is there already
        tenant.save()
        Domain.objects.create(domain=f"{name}.localhost", tenant=tenant, is_primary=True)
        issued = issue_api_key(tenant=tenant, name="initial")
    return tenant, issued.plain_key


def populate(schema: str, upstream_port: int) -> None:
    """A deployment, the support route, a collection of a few documents and a user's memories."""
    import copy

    from django_tenants.utils import schema_context

    from contextplatform.demo.defaults import DEMO_DOCUMENTS, DEMO_MEMORIES, SUPPORT_ROUTE_CORE
    from contextplatform.deployments.services import parse_deployment, upsert_deployment
    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.services import upsert_route
    from memory.services import create_memory
    from sources.embedding import get_embedder
    from sources.ingestion import DocumentInput, create_collection, submit_documents
    from sources.tasks import enqueue_ingestion

    route = copy.deepcopy(SUPPORT_ROUTE_CORE)
    route["model"]["upstream"] = DEPLOYMENT
    route["context"]["sources"].append({"type": "memory", "name": "memories", "priority": 70})
    embedder = get_embedder()
    with schema_context(schema):
        spec = parse_deployment(
            {
                "name": DEPLOYMENT,
                "protocol": "openai",
                "base_url": f"http://{HOST}:{upstream_port}/v1",
                "model": "bench-model",
                "api_key": "sk-bench-upstream",
                "timeout_ms": 30000,
                "may_judge": False,
            },
            prefix="scale deployment",
        )
        upsert_deployment(spec=spec, api_key=spec.api_key)
        upsert_route(spec=validate_route_spec(route))
        collection = create_collection(name="support-kb", description="scale bench")
        job = submit_documents(
            collection=collection,
            documents=[
                DocumentInput(id=d["id"], title=d["title"], text=d["text"], metadata=d["metadata"])
                for d in DEMO_DOCUMENTS[:DOCUMENTS]
            ],
        )
        enqueue_ingestion(job)  # inline: this process runs without a broker
        for memory in DEMO_MEMORIES[:MEMORIES]:
            create_memory(user_id=USER, content=memory["content"], embedder=embedder)


@dataclass
class Tenants:
    keys: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def grow(
    tenants: Tenants, target: int, step: Step, normal: int, upstream_port: int, dump: str
) -> None:
    """Up to ``target`` tenants: the first ``normal`` new ones through the normal path, the rest
    cloned; each then populated."""
    created = 0
    while len(tenants.names) < target:
        name = f"{PREFIX}t{len(tenants.names):06d}"
        begun = time.perf_counter()
        if created < normal:
            _, key = create_normal(name)
            step.normal_create_s.append(time.perf_counter() - begun)
        else:
            _, key = create_cloned(name, dump)
            step.clone_create_s.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        populate(name, upstream_port)
        step.populate_s.append(time.perf_counter() - begun)
        tenants.names.append(name)
        tenants.keys.append(key)
        created += 1
        if created % 100 == 0:
            log(f"scale: {len(tenants.names)}/{target} tenants (load {load_average()})")


# Catalog ----------------------------------------------------------------------------------------


def catalog(step: Step) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class")
        step.pg_class_rows = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'pg_catalog' AND c.relkind = 'r'"
        )
        step.pg_catalog_bytes = int(cursor.fetchone()[0])
        cursor.execute("SELECT pg_database_size(current_database())")
        step.database_bytes = int(cursor.fetchone()[0])


def sweeps(step: Step) -> None:
    """One run of each periodic task that visits every tenant's schema in turn (Celery beat):
    its time grows with the tenant count, and it must stay well under its interval."""
    from compression.tasks import purge_expired_recovery
    from memory.tasks import resend_stranded_turns_task

    for name, task in (
        ("memory.resend_stranded_turns (every 60 s)", resend_stranded_turns_task),
        ("compression.purge_expired_recovery (every 600 s)", purge_expired_recovery),
    ):
        begun = time.perf_counter()
        task()
        step.sweep_s[name] = time.perf_counter() - begun


# HTTP -------------------------------------------------------------------------------------------


def resolve_request(key: str) -> tuple[str, dict[str, str], bytes]:
    from contextplatform.demo.defaults import DEMO_QUESTION

    body = {
        "route": ROUTE,
        "user": USER,
        "request": {
            "model": "gpt-4o-mini",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": DEMO_QUESTION}],
        },
    }
    return "/api/v1/resolve", {"Authorization": f"Bearer {key}"}, json.dumps(body).encode()


def gateway_request(key: str) -> tuple[str, dict[str, str], bytes]:
    from contextplatform.demo.defaults import DEMO_QUESTION

    body = {
        "model": ROUTE,
        "max_tokens": 64,
        "user": USER,
        "messages": [{"role": "user", "content": DEMO_QUESTION}],
    }
    return "/v1/chat/completions", {"Authorization": f"Bearer {key}"}, json.dumps(body).encode()


async def drive(
    base_url: str, requests: list[tuple[str, dict[str, str], bytes]], errors: dict[str, int]
) -> list[float]:
    """``requests`` sent by ``CONCURRENCY`` keep-alive clients; each one's latency in ms."""
    queue = list(enumerate(requests))
    latencies: list[float] = [0.0] * len(requests)
    done: list[bool] = [False] * len(requests)

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=60.0) as http:
            while queue:
                index, (path, headers, body) = queue.pop()
                headers = {**headers, "Content-Type": "application/json"}
                begun = time.perf_counter()
                try:
                    response = await http.post(path, content=body, headers=headers)
                except httpx.HTTPError as error:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                    continue
                if response.status_code != 200:
                    label = f"{path} {response.status_code}"
                    errors[label] = errors.get(label, 0) + 1
                    continue
                latencies[index] = (time.perf_counter() - begun) * 1000
                done[index] = True

    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return [latency for latency, ok in zip(latencies, done, strict=True) if ok]


def rss_mb(server: Any) -> float:
    return float(psutil.Process(server.process.pid).memory_info().rss) / 2**20


class ConnectionSampler:
    """The most client connections PostgreSQL held at once while the block ran (ours left out)."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg
        from django.db import connection

        params = dict(connection.get_connection_params())
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        with psycopg.connect(**params, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                self._stop.wait(0.1)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def sessions_opened() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def server_log() -> Path | None:
    if os.environ.get("DATABASE_URL", "").strip():
        return None
    from contextplatform.database import embedded_data_dir

    return embedded_data_dir(ROOT) / "log"


def count_statements(base_url: str, keys: list[str], rng: random.Random, step: Step) -> None:
    """Statements, and ``SET search_path`` among them, per resolve of a random tenant: the
    scratch server logs every statement for the count (``log_statement``), then stops."""
    from django.db import connection

    log_path = server_log()
    if log_path is None:
        return
    calls = 100
    with connection.cursor() as cursor:
        cursor.execute("ALTER SYSTEM SET log_statement = 'all'")
        cursor.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)
    start = log_path.stat().st_size
    errors: dict[str, int] = {}
    done = asyncio.run(
        drive(base_url, [resolve_request(rng.choice(keys)) for _ in range(calls)], errors)
    )
    time.sleep(1.5)  # the replay writer's batch lands
    with connection.cursor() as cursor:
        cursor.execute("ALTER SYSTEM RESET log_statement")
        cursor.execute("SELECT pg_reload_conf()")
    with log_path.open("rb") as logged:
        logged.seek(start)
        text = logged.read().decode(errors="replace")
    statements = re.findall(r"(?:statement|execute [^:]*): (.*)", text)
    sets = sum(1 for s in statements if s.lstrip().upper().startswith("SET SEARCH_PATH"))
    count = max(len(done), 1)
    step.statements_per_request = len(statements) / count
    step.set_search_path_per_request = sets / count


def measure_http(tenants: Tenants, step: Step, requests: int, upstream_port: int) -> None:
    from scripts.bench_http import running_server

    rng = random.Random(len(tenants.names))
    errors: dict[str, int] = {}
    with running_server(1, dict(os.environ), log_name="scale-uvicorn.log") as server:
        base = server.base_url
        asyncio.run(drive(base, [resolve_request(tenants.keys[0])] * 4, errors))
        step.rss_start_mb = rss_mb(server)
        # Every tenant served once (its key, route, deployment and schema first read here).
        touch = [resolve_request(key) for key in tenants.keys]
        step.first_touch_ms = asyncio.run(drive(base, touch, errors))
        step.rss_touched_mb = rss_mb(server)
        sessions_before = sessions_opened()
        with ConnectionSampler() as sampler:
            resolves = [resolve_request(rng.choice(tenants.keys)) for _ in range(requests)]
            step.resolve_ms = asyncio.run(drive(base, resolves, errors))
            calls = [gateway_request(rng.choice(tenants.keys)) for _ in range(requests)]
            step.gateway_ms = asyncio.run(drive(base, calls, errors))
        step.sessions_per_request = (sessions_opened() - sessions_before) / (2 * requests)
        step.server_connections_max = sampler.most
        step.rss_after_mb = rss_mb(server)
        count_statements(base, tenants.keys, rng, step)
    step.http_errors = errors


# migrate_schemas --------------------------------------------------------------------------------


def previous_migration(app_dir: Path) -> str:
    names = sorted(
        path.stem
        for path in (app_dir / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py")
        if path.stem != PROBE_MIGRATION
    )
    return names[-1]


def timed_manage(*args: str) -> float:
    """Seconds ``manage.py <args>`` took; NaN when it failed or hung past ``MIGRATE_TIMEOUT_S``.

    Run without the connection pool: the multiprocessing executor forks workers from a process
    whose pool threads do not survive the fork."""
    import subprocess
    import sys

    env = {**os.environ, "DB_POOL_MAX_SIZE": "0"}
    begun = time.perf_counter()
    try:
        completed = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=MIGRATE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log(f"scale: manage.py {' '.join(args)} hung past {MIGRATE_TIMEOUT_S:.0f} s")
        return float("nan")
    if completed.returncode:
        log(f"scale: manage.py {' '.join(args)} failed: {completed.stderr[-1500:]}")
        return float("nan")
    return time.perf_counter() - begun


def measure_migrations(step: Step) -> None:
    """No-op, then the probe migration applied and rolled back, serial and parallel."""
    base = ("migrate_schemas", "--noinput", "-v", "0")
    parallel = ("--executor=multiprocessing",)
    step.migrate_s["no-op, serial"] = timed_manage(*base)
    step.migrate_s["no-op, parallel"] = timed_manage(*base, *parallel)
    previous = previous_migration(ROOT / PROBE_APP)
    PROBE_PATH.write_text(PROBE_SOURCE.format(app=PROBE_APP, previous=previous))
    try:
        for label, executor in (("serial", ()), ("parallel", parallel)):
            step.migrate_s[f"one migration, {label}"] = timed_manage(*base, *executor)
            # Rolled back (unmeasured) so the other executor applies it again.
            timed_manage(*base, PROBE_APP, previous)
    finally:
        PROBE_PATH.unlink(missing_ok=True)
        for compiled in (PROBE_PATH.parent / "__pycache__").glob(f"{PROBE_MIGRATION}.*"):
            compiled.unlink(missing_ok=True)


# The run ----------------------------------------------------------------------------------------


def schema_shape(schema: str) -> list[tuple[Any, ...]]:
    """Every column with its exact type (dimensions included) and every index's definition."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY 1, 2",
            [schema],
        )
        columns = cursor.fetchall()
        cursor.execute(
            "SELECT replace(indexdef, %s, '') FROM pg_indexes WHERE schemaname = %s ORDER BY 1",
            [f"{schema}.", schema],
        )
        indexes = cursor.fetchall()
    return [*columns, *indexes]


def check_cloned_tenant(tenants: Tenants, run: Run) -> None:
    """A cloned tenant's tables, column types and indexes are those of a tenant created through
    the normal path (its routes and resolve are the HTTP measurement's, with no errors)."""
    if len(tenants.names) <= run.normal_per_step:
        return
    normal, cloned = schema_shape(tenants.names[0]), schema_shape(tenants.names[-1])
    run.cloned_tenant_checked = normal == cloned and bool(normal)


def measure(sizes: list[int], quick: bool, out: Path) -> None:
    from scripts.bench_gateway import running_upstream
    from scripts.bench_server import free_port

    started = time.perf_counter()
    normal_per_step = 3 if quick else 10
    run = Run(
        sizes=sizes,
        quick=quick,
        normal_per_step=normal_per_step,
        requests=200 if quick else 1000,
        processes=int(os.environ.get("TENANT_MULTIPROCESSING_MAX_PROCESSES", "2")),
    )
    log("scale: migrate_schemas on the scratch database …")
    manage("migrate_schemas", "--noinput", "-v", "0")
    setup_django()
    from scripts.bench_env import database_description

    run.database = database_description().replace("data in .pgdata", "a scratch data folder")
    begun = time.perf_counter()
    create_normal(TEMPLATE)
    run.template_create_s = time.perf_counter() - begun
    run.django_tenants_clone_error = clone_with_django_tenants(f"{PREFIX}probe")
    dump = template_dump()
    tenants = Tenants()
    port = free_port()
    # A migration over every tenant takes about a second per tenant on a loaded machine, six
    # times per count: past this count only the rest is measured (docs/scale.md extrapolates).
    migrate_up_to = int(os.environ.get("BENCH_SCALE_MIGRATE_UP_TO", "0")) or max(sizes)
    run.migrate_up_to = migrate_up_to
    with running_upstream(port, dict(os.environ)):
        for size in sizes:
            step = Step(tenants=size)
            log(f"scale: growing to {size} tenants (load {load_average()}) …")
            grow(tenants, size, step, normal_per_step, port, dump)
            catalog(step)
            sweeps(step)
            log(f"scale: {size} tenants: HTTP, random tenant per request …")
            measure_http(tenants, step, run.requests, port)
            if size <= migrate_up_to:
                log(f"scale: {size} tenants: migrate_schemas serial and parallel …")
                measure_migrations(step)
            step.load_average = load_average()
            run.steps.append(step)
            out.write_text(json.dumps(asdict(run)))  # what was measured so far survives
    check_cloned_tenant(tenants, run)
    run.runtime_s = time.perf_counter() - started
    out.write_text(json.dumps(asdict(run)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    measure(sizes, options.quick, options.out)


if __name__ == "__main__":
    main()
