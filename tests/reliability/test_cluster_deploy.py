"""What an operator takes to production (``deploy/``) runs the processes ``make cluster`` runs
(``scripts/cluster.py``): the Compose file parses, names the same commands as the Procfile, and
every environment variable the settings read is described in docs/deploy.md. Docker cannot run
here, so the files are checked as files."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import yaml

from contextplatform import queues
from scripts import cluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Options whose values are the deployment's own (ports, counts, paths, names): compared by name.
VALUED = {"--workers", "--bind", "--concurrency", "--hostname", "--schedule"}
VALUED |= {"--listen", "--pool-size", "--dir"}
# Procfile process → Compose service; one worker per kind of work (contextplatform/queues.py).
WORKERS = {f"worker_{kind}": f"worker-{kind}" for kind in queues.WORKER_KINDS}
SERVICES = {"release": "migrate", "pgbouncer": "pgbouncer", "web": "web", "beat": "beat", **WORKERS}


def normalised(args: list[str]) -> list[str]:
    """A command with its program named plainly (``celery``, ``gunicorn``, ``python``) and the
    deployment's own option values left out."""
    if args[0] == "env":  # the Procfile's release sets its own variables first
        args = args[1:]
        while "=" in args[0]:
            args = args[1:]
    words = [Path(word).name if word.startswith("/") else word for word in args]
    if words[:3] == [Path(sys.executable).name, "-m", "celery"]:
        words = ["celery", *words[3:]]
    if words[0].startswith("python"):
        words[0] = "python"
    return [
        "*" if index and words[index - 1] in VALUED else word for index, word in enumerate(words)
    ]


def procfile() -> dict[str, list[str]]:
    lines = (DEPLOY / "Procfile").read_text(encoding="utf-8").splitlines()
    entries = (line.split(":", 1) for line in lines if line.strip())
    return {name.strip(): shlex.split(command) for name, command in entries}


def compose() -> dict[str, dict[str, object]]:
    document = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    return dict(document["services"])


def test_compose_and_procfile_name_the_same_commands_as_the_cluster() -> None:
    processes, services = procfile(), compose()
    assert set(processes) == set(SERVICES)
    for process, service in SERVICES.items():
        command = services[service]["command"]
        assert isinstance(command, list), service
        assert normalised(command) == normalised(processes[process]), process
    schedule = Path("/var/lib/context-platform/celerybeat-schedule")
    launched = {
        "release": cluster.migrate_command(),
        "web": cluster.web_command("127.0.0.1", 8000, 2),
        "beat": cluster.beat_command(schedule),
    }
    for index, kind in enumerate(queues.WORKER_KINDS):
        consumed = [queues.queue_name(kind, "celery")]
        launched[f"worker_{kind}"] = cluster.worker_command(f"worker{index}", 1, consumed)
    for process, command in launched.items():
        assert normalised(command) == normalised(processes[process]), process


def test_compose_runs_migrations_once_before_the_application_and_probes_it() -> None:
    services = compose()
    assert services["postgres"]["image"] == "pgvector/pgvector:pg16"
    assert services["migrate"]["restart"] == "no"
    for name in ("web", "beat", *WORKERS.values()):
        needs = services[name]["depends_on"]
        assert needs["migrate"] == {"condition": "service_completed_successfully"}, name
        assert needs["pgbouncer"] == {"condition": "service_healthy"}, name
    # The migrations on PostgreSQL itself, everything else through the pool.
    assert services["migrate"]["environment"]["DATABASE_POOLED"] == "0"
    assert "@postgres:5432/" in services["migrate"]["environment"]["DATABASE_URL"]
    assert "@pgbouncer:6432/" in services["web"]["environment"]["DATABASE_URL"]
    probe = " ".join(services["web"]["healthcheck"]["test"])
    assert "/healthz" in probe and "/readyz" in probe
    redis = services["redis"]["command"]
    assert redis[redis.index("--appendonly") + 1] == "yes"  # queued tasks outlive a restart
    environment = services["web"]["environment"]
    assert environment["DJANGO_ENV"] == "production"


def test_every_variable_the_settings_read_is_described() -> None:
    sources = [ROOT / "contextplatform" / name for name in ("settings.py", "database.py")]
    pattern = re.compile(r"""(?:environ\.get|environ\[|env_\w+)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
    read = {name for source in sources for name in pattern.findall(source.read_text())}
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_ENV"} <= read
    described = set(
        re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "deploy.md").read_text(), re.M)
    )
    assert read - described == set()
