"""The cluster shape through PgBouncer in transaction pooling, with two server connections for
every process (two web workers with ten client connections each, two Celery workers, beat).

A server connection serves one transaction of one client, then another client's, of another
process and another tenant. What must hold:

- no statement runs on another tenant's ``search_path``: three tenants' clients write and read
  their own collections (writes inside a transaction, reads in autocommit, ingestion in the Celery
  workers) at once, and every answer holds that tenant's rows only;
- a key revoked in one process is refused by every web worker as soon as the revoking transaction
  commits: the configuration cache LISTENs on PostgreSQL itself (``DATABASE_DIRECT_URL``), since a
  LISTEN through the pool would be left on a server connection other clients use.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

from scripts.cluster import Cluster

pytestmark = pytest.mark.reliability

CLUSTER_OPTIONS = {"pool_size": 2}  # far fewer server connections than clients: shared hard
TENANTS = ("pool_a", "pool_b")  # and the demo's
THREADS_PER_TENANT = 4
ROUNDS = 12
WAIT_S = 120.0

CREATE_TENANTS = """
import json
from tenants.services import create_tenant, issue_api_key
keys = {}
for name in %r:
    tenant, issued = create_tenant(name=name)
    keys[name] = issued.plain_key
    keys[name + ":revocable"] = issue_api_key(tenant=tenant, name="revocable").plain_key
print("KEYS " + json.dumps(keys))
"""

REVOKE = """
from tenants.models import ApiKey
from tenants.services import revoke_api_key
revoke_api_key(api_key=ApiKey.objects.get(tenant__schema_name=%r, name="revocable"))
"""


def manage_shell(cluster: Cluster, name: str, code: str) -> str:
    """``code`` run by ``manage.py shell`` as a process of the cluster (through the pool)."""
    return cluster.run_step(name, [sys.executable, "manage.py", "shell", "-c", code])


@pytest.fixture(scope="module")
def keys(cluster: Cluster) -> dict[str, str]:
    output = manage_shell(cluster, "create_tenants", CREATE_TENANTS % (TENANTS,))
    line = next(line for line in output.splitlines() if line.startswith("KEYS "))
    created: dict[str, str] = json.loads(line.removeprefix("KEYS "))
    return {"demo": cluster.api_key, **created}


def request(cluster: Cluster, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    """On a connection of its own: the arbiter's two workers take turns accepting."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=cluster.base_url, headers=headers, timeout=60) as client:
        return client.request(method, f"/api/v1/{path}", json=body)


def test_no_statement_runs_on_another_tenants_search_path(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    tenants = ["demo", *TENANTS]
    wrong: list[str] = []
    lock = threading.Lock()

    def fail(what: str) -> None:
        with lock:
            wrong.append(what)

    def hammer(tenant: str, thread: int) -> int:
        checked = 0
        with httpx.Client(
            base_url=cluster.base_url,
            headers={"Authorization": f"Bearer {keys[tenant]}"},
            timeout=60,
        ) as client:
            for round_ in range(ROUNDS):
                name = f"{tenant}-t{thread}-{round_}"
                written = client.post("/api/v1/collections", json={"name": name})
                if written.status_code != 201:
                    fail(f"{tenant} POST {name}: {written.status_code} {written.text[:200]}")
                    continue
                listed = client.get("/api/v1/collections")
                if listed.status_code != 200:
                    fail(f"{tenant} GET: {listed.status_code} {listed.text[:200]}")
                    continue
                names = [row["name"] for row in listed.json()["data"]]
                foreign = [
                    n for n in names if n.startswith(tuple(t for t in tenants if t != tenant))
                ]
                if foreign:
                    fail(f"{tenant} saw {foreign[:3]}")
                if name not in names:
                    fail(f"{tenant} did not see its own {name}")
                checked += 1
        return checked

    with ThreadPoolExecutor(len(tenants) * THREADS_PER_TENANT) as pool:
        futures = [
            pool.submit(hammer, tenant, thread)
            for tenant in tenants
            for thread in range(THREADS_PER_TENANT)
        ]
        checked = sum(future.result(timeout=600) for future in futures)
    assert wrong == []
    assert checked == len(tenants) * THREADS_PER_TENANT * ROUNDS

    # Ingestion in the Celery workers, all tenants at once: each tenant's documents land in its
    # own schema and only there.
    jobs = {}
    for tenant in tenants:
        documents = [
            {"id": f"{tenant}-doc-{n}", "text": f"{tenant} owns document {n}."} for n in range(5)
        ]
        posted = request(
            cluster,
            keys[tenant],
            "POST",
            f"collections/{tenant}-t0-0/documents",
            {"documents": documents},
        )
        assert posted.status_code == 202, posted.text
        jobs[tenant] = posted.json()["job"]
    deadline = time.monotonic() + WAIT_S
    for tenant, job in jobs.items():
        while True:
            status = request(cluster, keys[tenant], "GET", f"jobs/{job}").json()["status"]
            if status in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == "done", (tenant, status)
        listed = request(cluster, keys[tenant], "GET", f"collections/{tenant}-t0-0/documents")
        ids = sorted(row["id"] for row in listed.json()["data"])
        assert ids == sorted(f"{tenant}-doc-{n}" for n in range(5)), (tenant, ids)
    with psycopg.connect(cluster.database_url, autocommit=True) as direct:
        for tenant in tenants:
            counted = direct.execute(
                f'SELECT count(*) FROM "{tenant}".sources_collection'
            ).fetchone()
            assert counted == (THREADS_PER_TENANT * ROUNDS + (2 if tenant == "demo" else 0),)


def test_a_revoked_key_is_refused_by_every_process_once_committed(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    key = keys["pool_a:revocable"]
    # Twenty requests on connections of their own: both web workers have read the key and keep it.
    for _ in range(20):
        assert request(cluster, key, "GET", "collections").status_code == 200
    with psycopg.connect(cluster.database_url, autocommit=True) as direct:
        listening = direct.execute(
            # Each listener's session, on PostgreSQL itself (its last statement: the LISTEN, or
            # the ping it sends every ten seconds).
            "SELECT count(*) FROM pg_stat_activity WHERE query IN"
            " ('LISTEN contextplatform_config', 'SELECT 1')"
            " AND application_name = 'contextplatform-config-listener'"
        ).fetchone()
    assert listening is not None and listening[0] >= cluster.web_workers

    # Revoked through the pool by another process: the command returns once it has committed.
    manage_shell(cluster, "revoke", REVOKE % ("pool_a",))
    # Refused at once by both workers: the notification's trip is milliseconds, while a process
    # that missed it would accept the key it kept for MAX_AGE_S (five minutes).
    statuses = [request(cluster, key, "GET", "collections").status_code for _ in range(20)]
    assert statuses == [401] * 20
    # The tenant's other key still works.
    assert request(cluster, keys["pool_a"], "GET", "collections").status_code == 200
