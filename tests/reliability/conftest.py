"""The cluster shape for the fault tests: one ``scripts.cluster.Cluster`` per module (its own
PostgreSQL over TCP, its own Redis, gunicorn with two uvicorn workers, two Celery workers and
beat), torn down with nothing left running.

Tests that use the ``cluster`` fixture run in ``make reliability`` only (``pytest -m
reliability``): a cluster takes a minute to start and the faults minutes to play out, past what
``make test`` may spend. A plain ``pytest`` run deselects them here, by the fixture, so other
tests of this folder keep running in ``make test`` whatever their marks."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scripts.cluster import Cluster
from tests.conftest import ApiClient, TenantFixture
from tests.reliability.bad_input import GatewayRoutes, routes_to_loopback

REDIS_PORTS = range(6390, 6400)  # Redis servers these tests start keep to these ports


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "reliability" in (config.option.markexpr or ""):
        return
    deselected = [item for item in items if "cluster" in getattr(item, "fixturenames", ())]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


def free_redis_port() -> int:
    for port in REDIS_PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {REDIS_PORTS} for the cluster's Redis")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A whole cluster under a fresh directory of ``CLUSTER_ROOT`` (kept, with its logs), else of
    the system's temporary one (removed), its Redis on a port of ``REDIS_PORTS``; a module's
    ``CLUSTER_ENV`` is given to every process of its cluster, its ``CLUSTER_OPTIONS`` to the
    ``Cluster`` (``pool_size``: PgBouncer's server connections)."""
    parent = os.environ.get("CLUSTER_ROOT") or None
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="cluster-", dir=parent))
    root.chmod(0o755)  # PostgreSQL's own user reads its data folder under it
    extra_env = dict(getattr(request.module, "CLUSTER_ENV", {}))
    options = dict(getattr(request.module, "CLUSTER_OPTIONS", {}))
    launched = Cluster(root=root, redis_port=free_redis_port(), extra_env=extra_env, **options)
    pids: list[int] = []
    try:
        launched.start()
        yield launched
    finally:
        pids = [part.pid for part in launched.parts.values()]
        launched.stop()
    left = [
        pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
    ]
    assert left == [], f"processes left running: {left}"
    if not parent:  # under CLUSTER_ROOT the data and logs are kept to read
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def gateway_routes(acme_api: ApiClient, acme: TenantFixture) -> Iterator[GatewayRoutes]:
    """acme's routes to a loopback upstream, one per provider (the bad-input modules')."""
    with routes_to_loopback(acme_api, acme.schema) as routes:
        yield routes
