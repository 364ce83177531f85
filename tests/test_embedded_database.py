"""The embedded PostgreSQL: shared by several processes, never orphaned, vector in public."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from django.db import connection

from contextplatform.database import from_url, prune_dead_pids
from tests import live
from tests.test_production_server import run_command, wait_for

ROOT = Path(__file__).resolve().parent.parent
HOLDER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from contextplatform.database import embedded\n"
    "embedded(Path('.'))\n"
    "print('ready', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


def start_holder(datadir: Path, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PGSERVER_DATADIR": str(datadir)}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def postmaster_pid(datadir: Path) -> int:
    return int((datadir / "postmaster.pid").read_text().splitlines()[0])


def wait_until_gone(pid: int, attempts: int = 100) -> bool:
    for _ in range(attempts):
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def wait_for_holders(datadir: Path, count: int, attempts: int = 600) -> list[int]:
    """The PIDs in the server's handle file, once ``count`` processes have attached."""
    pids: list[int] = []
    for _ in range(attempts):
        handle = datadir / ".handle_pids.json"
        pids = json.loads(handle.read_text() or "[]") if handle.exists() else []
        if len(pids) >= count:
            break
        time.sleep(0.1)
    return pids


@pytest.fixture
def datadir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pg"
    yield path
    info = path / "postmaster.pid"
    if info.exists():  # never leave a server behind, even when a test fails
        pid = postmaster_pid(path)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGQUIT)


def test_last_process_to_exit_stops_the_server(datadir: Path) -> None:
    first = start_holder(datadir, 30)
    second = start_holder(datadir, 0)
    server = postmaster_pid(datadir)
    assert second.wait(timeout=30) == 0
    assert psutil.pid_exists(server), "the server stopped while another process still used it"
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 143
    assert wait_until_gone(server), "plain SIGTERM of the last holder left the server running"


def test_a_killed_holder_does_not_orphan_the_server(datadir: Path) -> None:
    killed = start_holder(datadir, 30)
    server = postmaster_pid(datadir)
    killed.kill()
    killed.wait(timeout=30)
    assert psutil.pid_exists(server)
    later = start_holder(datadir, 0)  # attaches, prunes the dead PID, exits as the last holder
    assert later.wait(timeout=30) == 0
    assert wait_until_gone(server), "a SIGKILLed holder's stale PID kept the server alive"


def test_ctrl_c_of_make_run_stops_the_server(datadir: Path) -> None:
    """The server ``make run`` starts, over a data folder of its own, stopped as a terminal's
    Ctrl-C stops it (SIGINT to the whole process group): its uvicorn workers die by the signal,
    without their exit hook, and the server must stop with them, its handle file emptied."""
    port = live.free_port()
    environment = {**os.environ, "PGSERVER_DATADIR": str(datadir)}
    environment.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        run_command(port, workers=2),
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as the terminal's job
    )
    try:
        wait_for(f"http://127.0.0.1:{port}", server)
        holders = wait_for_holders(datadir, 2)
        postmaster = postmaster_pid(datadir)
        os.killpg(server.pid, signal.SIGINT)
        code = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    log = server.stderr.read() if server.stderr else ""
    assert len(holders) == 2, holders  # both workers held it
    assert code == 0, log[-3000:]
    assert wait_until_gone(postmaster), "the server outlived the Ctrl-C of make run"
    assert json.loads((datadir / ".handle_pids.json").read_text()) == []


def test_data_survives_a_restart(datadir: Path) -> None:
    script = (
        "from pathlib import Path\n"
        "from contextplatform.database import embedded\n"
        "import psycopg\n"
        "c = embedded(Path('.'))\n"
        "conn = psycopg.connect(host=c['HOST'], port=c['PORT'], user='postgres', dbname=c['NAME'], autocommit=True)\n"
        "conn.execute('CREATE TABLE IF NOT EXISTS kept (v text)')\n"
        "conn.execute(\"INSERT INTO kept VALUES ('x')\")\n"
        "print(conn.execute('SELECT count(*) FROM kept').fetchone()[0])\n"
        "conn.close()\n"
    )
    env = {**os.environ, "PGSERVER_DATADIR": str(datadir)}
    counts = [
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
        for _ in range(2)
    ]
    assert counts == ["1", "2"]
    assert not (datadir / "postmaster.pid").exists(), (
        "the server was left running after the last process"
    )


def test_prune_dead_pids_keeps_live_ones(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".handle_pids.json").write_text(f"[{os.getpid()}, {dead.pid}]")
    assert prune_dead_pids(tmp_path) == [os.getpid()]


def test_database_url_parsing() -> None:
    config = from_url("postgresql://app:s%40cret@db.example:6543/contexts?sslmode=require")
    assert config["NAME"] == "contexts"
    assert config["USER"] == "app"
    assert config["PASSWORD"] == "s@cret"
    assert (config["HOST"], config["PORT"]) == ("db.example", "6543")
    assert config["OPTIONS"] == {"sslmode": "require"}
    socket = from_url("postgresql://postgres:@/app?host=/tmp/pg")
    assert socket["HOST"] == "/tmp/pg"
    with pytest.raises(ValueError):
        from_url("mysql://x@y/z")


@pytest.mark.django_db
def test_vector_extension_lives_in_public() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
        )
        assert cursor.fetchone() == ("public",)
