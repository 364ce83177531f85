"""Faults the cluster shape survives, each played against a real cluster (``scripts.cluster``):
a Celery worker killed mid-write, Redis restarted, PostgreSQL restarted, an ASGI worker killed,
and SIGTERM to the web server with requests in flight.

The waits are upper bounds for a loaded machine to get somewhere, not measured times; the one
the issue sets (every turn written within 60 s of a killed worker's restart) is asserted as
written. Counts come from the cluster's own database, read with a connection of the test's."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from scripts.cluster import Cluster
from tests.loopback import Reply, Seen, running_service

pytestmark = pytest.mark.reliability

SCHEMA = "demo"  # bootstrap_demo's tenant: its key is the cluster's api_key
TURNS = 200
WRITTEN_AFTER_RESTART_S = 60.0  # the bound: every turn written within 60 s of the restart
WAIT_S = 120.0  # an upper bound for anything else to happen on a loaded machine
MEMORY_ROUTE = "faults-memory"


# --- talking to the cluster ---------------------------------------------------------------------


def api(cluster: Cluster) -> httpx.Client:
    """A client of its own: each test's requests on fresh connections, so both workers serve."""
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    return httpx.Client(base_url=cluster.base_url, headers=headers, timeout=60)


def fresh(cluster: Cluster, method: str, path: str, body: Any = None) -> httpx.Response:
    """One request on a connection of its own (the arbiter's workers take turns accepting)."""
    with api(cluster) as client:
        return client.request(method, path, json=body)


def rows(cluster: Cluster, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with psycopg.connect(cluster.database_url, autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{SCHEMA}"')
        return connection.execute(sql, params).fetchall()


def until(check: Callable[[], bool], timeout_s: float = WAIT_S, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"not within {timeout_s:.0f} s: {what}")


def resolve_body(route: str, user: str, text: str) -> dict[str, Any]:
    return {
        "route": route,
        "user": user,
        "request": {"messages": [{"role": "user", "content": text}]},
    }


def handed_back_turn(cluster: Cluster, user: str, text: str) -> str:
    """A resolve on the memory route, then its answer handed back: the turn queued for a worker."""
    with api(cluster) as client:
        resolved = client.post("/api/v1/resolve", json=resolve_body(MEMORY_ROUTE, user, text))
        assert resolved.status_code == 200, resolved.text
        resolve_id = resolved.json()["id"]
        answer = {"choices": [{"message": {"role": "assistant", "content": "Noted."}}]}
        accepted = client.post(f"/api/v1/resolve/{resolve_id}/response", json={"response": answer})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["memory_write"] == "queued", accepted.text
    return str(resolve_id)


def queue_turns(cluster: Cluster, users: list[str]) -> dict[str, str]:
    """One turn per user ("I prefer window seats in row N.": one memory each), sent by 8 clients
    at once; the resolve id of each user's turn."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = pool.map(
            lambda pair: handed_back_turn(
                cluster, pair[1], f"I prefer window seats in row {pair[0]}."
            ),
            enumerate(users),
        )
        return dict(zip(users, ids, strict=True))


def turn_statuses(cluster: Cluster, resolve_ids: list[str]) -> dict[str, tuple[str, int]]:
    found = rows(
        cluster,
        "SELECT resolve_id, status, added FROM memory_memoryturn WHERE resolve_id = ANY(%s)",
        [resolve_ids],
    )
    return {resolve_id: (status, added) for resolve_id, status, added in found}


def pending(cluster: Cluster, resolve_ids: list[str]) -> int:
    statuses = turn_statuses(cluster, resolve_ids)
    return sum(1 for status, _ in statuses.values() if status == "pending")


def memories_per_user(cluster: Cluster, users: list[str]) -> dict[str, int]:
    found = rows(
        cluster,
        "SELECT user_id, count(*) FROM memory_memory WHERE user_id = ANY(%s) GROUP BY user_id",
        [users],
    )
    return dict(found)


TASK_LINE = re.compile(r"Task memory\.write_turn\[([0-9a-f-]+)\] (received|succeeded)")


def running_task(log: str) -> str | None:
    """The memory write a worker has received and not finished, by its log."""
    running: dict[str, None] = {}
    for task, event in TASK_LINE.findall(log):
        if event == "received":
            running[task] = None
        else:
            running.pop(task, None)
    return next(reversed(running), None) if running else None


@pytest.fixture(scope="module", autouse=True)
def memory_route(cluster: Cluster) -> None:
    """A route whose memory source writes every handed-back turn (the local extractor)."""
    route = {
        "name": MEMORY_ROUTE,
        "context": {"sources": [{"type": "memory", "name": "memories", "store": {"auto": True}}]},
    }
    created = fresh(cluster, "POST", "/api/v1/routes", route)
    assert created.status_code == 201, created.text


# --- a Celery worker killed mid-write -------------------------------------------------------------


def test_a_worker_killed_mid_write_loses_and_duplicates_no_turn(cluster: Cluster) -> None:
    run = uuid.uuid4().hex[:6]
    users = [f"kill-{run}-{index}" for index in range(TURNS)]

    def turns_of_users(status_test: str) -> int:
        sql = f"SELECT count(*) FROM memory_memoryturn WHERE user_id = ANY(%s) AND {status_test}"
        return int(rows(cluster, sql, [users])[0][0])

    # The turns are queued while the workers write them; worker 0 is SIGKILLed (its whole
    # session: the machine gone) in the middle, ten turns written and more waiting.
    queued: dict[str, str] = {}
    failures: list[BaseException] = []

    def send() -> None:
        try:
            queued.update(queue_turns(cluster, users))
        except BaseException as error:  # reported by the assertion below
            failures.append(error)

    sender = threading.Thread(target=send)
    sender.start()
    until(lambda: turns_of_users("status <> 'pending'") >= 10, what="ten turns written")
    left_at_kill = turns_of_users("status = 'pending'")
    logs = {name: part.log for name, part in cluster.parts.items() if name.startswith("worker")}
    until(lambda: running_task(logs["worker0"].read_text()) is not None, what="a write")
    cluster.kill_worker(0)
    sizes = {name: log.stat().st_size for name, log in logs.items()}
    task = running_task(logs["worker0"].read_text())  # what it held when it died
    assert task is not None, (
        f"the kill fell between two writes: {logs['worker0'].read_text()[-2000:]}"
    )
    sender.join(timeout=WAIT_S)
    assert not sender.is_alive() and len(queued) == TURNS, failures
    assert left_at_kill > 0, "every queued turn was written before the kill"
    ids = list(queued.values())

    cluster.start_worker(0)
    restarted = time.monotonic()
    until(
        lambda: pending(cluster, ids) == 0,
        timeout_s=WRITTEN_AFTER_RESTART_S,
        what=f"every turn written after the restart ({pending(cluster, ids)} pending)",
    )
    assert time.monotonic() - restarted <= WRITTEN_AFTER_RESTART_S
    statuses = turn_statuses(cluster, ids)
    odd = {resolve_id: state for resolve_id, state in statuses.items() if state != ("written", 1)}
    assert len(statuses) == TURNS and odd == {}  # each turn added its one memory
    per_user = memories_per_user(cluster, users)
    assert {user: count for user, count in per_user.items() if count != 1} == {}  # none twice
    assert len(per_user) == TURNS  # none lost
    # The write the killed worker was in is handed out again and run to its end. Every turn may be
    # written before that (the kill can fall after the write's commit, before its acknowledgement):
    # its redelivery then comes once the task is older than the visibility timeout.

    def after_kill() -> str:
        text = ""
        for name, log in logs.items():
            with log.open("rb") as lines:
                lines.seek(sizes[name])
                text += lines.read().decode(errors="replace")
        return text

    until(
        lambda: f"memory.write_turn[{task}] succeeded" in after_kill(),
        what=f"the killed worker's write {task} handed out again and run",
    )
    assert memories_per_user(cluster, users) == dict.fromkeys(users, 1)  # and written once


# --- Redis restarted ------------------------------------------------------------------------------


def live_socket(cluster: Cluster, sockets: ExitStack) -> ClientConnection:
    """A socket on the live stream, closed when ``sockets`` is."""
    url = cluster.base_url.replace("http://", "ws://") + "/ws/metrics/"
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    return sockets.enter_context(connect(url, additional_headers=headers, open_timeout=10))


def frame_after_resolve(socket: ClientConnection, cluster: Cluster) -> dict[str, Any] | None:
    """Resolve on the demo route; the source outcome frame the socket then receives (None when
    the socket was closed under it)."""
    with api(cluster) as client:
        body = resolve_body("support", "u_123", "Can I get a refund for my headphones?")
        assert client.post("/api/v1/resolve", json=body).status_code == 200
    try:
        return dict(json.loads(socket.recv(timeout=10)))
    except (ConnectionClosed, TimeoutError):
        return None


def test_redis_restarted_resolves_answer_the_stream_reconnects_queued_work_resumes(
    cluster: Cluster,
) -> None:
    sockets = ExitStack()
    socket = live_socket(cluster, sockets)
    assert frame_after_resolve(socket, cluster) is not None

    # Work queued in Redis while no worker takes it: it must outlive the restart.
    for index in range(cluster.celery_workers):
        cluster.stop_part(f"worker{index}")
    run = uuid.uuid4().hex[:6]
    users = [f"redis-{run}-{index}" for index in range(20)]
    ids = list(queue_turns(cluster, users).values())
    assert pending(cluster, ids) == len(ids)

    statuses: list[int] = []
    stop = threading.Event()

    def resolve_meanwhile() -> None:
        with api(cluster) as client:
            while not stop.is_set():
                body = resolve_body("support", "u_123", "How long does delivery take to Germany?")
                statuses.append(client.post("/api/v1/resolve", json=body).status_code)

    resolver = threading.Thread(target=resolve_meanwhile)
    resolver.start()
    try:
        cluster.stop_redis()
        until(lambda: len(statuses) >= 5, what="resolves with Redis down")
        cluster.start_redis()  # the same port and data folder
        count = len(statuses)
        until(lambda: len(statuses) >= count + 5, what="resolves after the restart")
    finally:
        stop.set()
        resolver.join(timeout=WAIT_S)
    assert set(statuses) == {200}, statuses

    # The stream: the socket opened before carries on, or a new one (the dashboard reconnects).
    def streaming() -> bool:
        nonlocal socket
        if frame_after_resolve(socket, cluster) is not None:
            return True
        socket = live_socket(cluster, sockets)
        return frame_after_resolve(socket, cluster) is not None

    with sockets:
        until(streaming, what="a live frame after the restart")

    for index in range(cluster.celery_workers):
        cluster.start_worker(index)
    until(lambda: pending(cluster, ids) == 0, what="the queued turns written")
    assert memories_per_user(cluster, users) == dict.fromkeys(users, 1)


# --- PostgreSQL restarted -------------------------------------------------------------------------


def test_postgres_restarted_requests_get_503_the_pool_recovers_no_write_is_lost(
    cluster: Cluster,
) -> None:
    user = f"pg-{uuid.uuid4().hex[:6]}"
    acknowledged = []
    for index in range(10):
        content = f"User keeps note number {index} before the restart."
        created = fresh(cluster, "POST", f"/api/v1/users/{user}/memories", {"content": content})
        assert created.status_code == 201, created.text
        acknowledged.append(content)

    cluster.stop_postgres()
    try:
        during = fresh(cluster, "GET", f"/api/v1/users/{user}/memories")
        assert during.status_code == 503, during.text
        assert during.json()["error"]["code"] == "database_unavailable"
        assert during.headers["retry-after"]
    finally:
        cluster.start_postgres()  # the same port and data folder

    # The web workers are not restarted: the pool replaces its broken connections by itself.
    web = cluster.parts["web"].pid
    # (Each process's pool retries with a doubling delay: the first answers may still be 503.)
    answered: list[httpx.Response] = []

    def every_worker_answers() -> bool:
        answered[:] = [fresh(cluster, "GET", f"/api/v1/users/{user}/memories") for _ in range(10)]
        return all(response.status_code == 200 for response in answered)

    until(every_worker_answers, what="ten requests in a row answered after the restart")
    assert cluster.parts["web"].pid == web
    for response in answered:  # the acknowledged writes, as each worker reads them
        assert {memory["content"] for memory in response.json()["data"]} == set(acknowledged)


# --- an ASGI worker killed ------------------------------------------------------------------------


def test_an_asgi_worker_killed_the_other_serves_gunicorn_replaces_it(cluster: Cluster) -> None:
    before = cluster.web_worker_pids()
    assert len(before) == cluster.web_workers
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    body = resolve_body("support", "u_123", "Do you ship to Norway?")
    answered = [fresh(cluster, "POST", "/api/v1/resolve", body).status_code for _ in range(20)]
    assert answered == [200] * 20

    def replaced() -> bool:
        pids = cluster.web_worker_pids()
        return len(pids) == cluster.web_workers and victim not in pids

    until(replaced, what="gunicorn replacing the killed worker")
    cluster.wait_ready()


def resolve_under_load(
    cluster: Cluster, stop: threading.Event, acknowledged: list[str], failed: list[str]
) -> None:
    """Resolves on a kept-alive connection until ``stop``: the ids answered 200, the failures."""
    body = resolve_body("support", "u_123", "What is your returns policy for headphones?")
    client = api(cluster)
    try:
        while not stop.is_set():
            try:
                answered = client.post("/api/v1/resolve", json=body)
            except httpx.HTTPError as error:  # its worker killed under it: nothing acknowledged
                failed.append(type(error).__name__)
                client.close()
                client = api(cluster)
                continue
            if answered.status_code == 200:
                acknowledged.append(answered.json()["id"])
            else:
                failed.append(str(answered.status_code))
    finally:
        client.close()


def test_an_asgi_worker_killed_under_load_loses_no_acknowledged_replay_record(
    cluster: Cluster,
) -> None:
    """Every resolve answered 200 has its replay record, also those the killed worker had
    accepted and not yet written: its spool is replayed by the worker that replaces it."""
    acknowledged: list[str] = []
    failed: list[str] = []
    stop = threading.Event()
    clients = [
        threading.Thread(target=resolve_under_load, args=(cluster, stop, acknowledged, failed))
        for _ in range(8)
    ]
    for client in clients:
        client.start()
    try:
        until(lambda: len(acknowledged) >= 400, what="400 resolves answered")
        victim = cluster.web_worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        at_kill = len(acknowledged)
        until(lambda: len(acknowledged) >= at_kill + 400, what="400 more after the kill")
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=WAIT_S)

    def replaced() -> bool:
        pids = cluster.web_worker_pids()
        return len(pids) == cluster.web_workers and victim not in pids

    until(replaced, what="gunicorn replacing the killed worker")
    cluster.wait_ready()

    def missing() -> list[str]:
        sql = "SELECT id FROM routing_replayrecord WHERE id = ANY(%s)"
        written = {row[0] for row in rows(cluster, sql, [acknowledged])}
        return [record_id for record_id in acknowledged if record_id not in written]

    lost: list[str] = []

    def all_written() -> bool:
        lost[:] = missing()
        return not lost

    try:
        until(all_written, timeout_s=WRITTEN_AFTER_RESTART_S, what="every record written")
    finally:
        print(  # the figure docs/deploy.md gives: records lost per acknowledged resolves
            f"\nworker killed under load: {len(lost)} of {len(acknowledged)} acknowledged "
            f"resolves without a replay record; {len(failed)} calls failed unanswered"
        )
    assert len(set(acknowledged)) == len(acknowledged)


# --- SIGTERM with requests in flight --------------------------------------------------------------


def grant(cluster: Cluster, url: str) -> None:
    """Let the demo tenant reach ``url``'s host and port, beside what its allow-list holds (the
    stand-in's port only), through the operators' own command."""
    with psycopg.connect(cluster.database_url, autocommit=True) as connection:
        found = connection.execute(
            "SELECT outbound_allowlist FROM public.tenants_tenant WHERE schema_name = %s", [SCHEMA]
        ).fetchone()
    entries = [*(found[0] if found else []), urlsplit(url).netloc]
    command = [sys.executable, "manage.py", "set_allowlist", SCHEMA, *entries]
    cluster.run_step("set_allowlist", command)


def slow_route(url: str) -> dict[str, Any]:
    """A route whose one source waits on a slow live service: its resolves stay in flight."""
    connector = {"name": "slow", "url": url, "select": "$.items[*]"}
    source = {
        "type": "realtime_apis",
        "name": "live",
        "connectors": [connector],
        "timeout_ms": 20000,
    }
    return {"name": f"faults-slow-{uuid.uuid4().hex[:6]}", "context": {"sources": [source]}}


def test_sigterm_drains_requests_in_flight_and_the_replay_writer(cluster: Cluster) -> None:
    in_flight = 6
    release = threading.Event()

    def slow(seen: Seen) -> Reply:
        release.wait(timeout=30)  # answered once SIGTERM has been sent
        return Reply(body=json.dumps({"items": [{"note": "slow answer"}]}).encode())

    with running_service() as service:
        service.responder = slow
        grant(cluster, service.url("/"))
        route = slow_route(service.url("/live/{user}"))
        assert fresh(cluster, "POST", "/api/v1/routes", route).status_code == 201
        body = resolve_body(route["name"], "u_123", "What is my balance?")
        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            calls = [
                pool.submit(fresh, cluster, "POST", "/api/v1/resolve", body)
                for _ in range(in_flight)
            ]
            until(lambda: service.hits >= in_flight, what="every resolve waiting on the service")
            web = cluster.parts["web"]
            web.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)  # the workers have the signal before the service answers
            release.set()
            responses = [call.result(timeout=WAIT_S) for call in calls]
            code = web.process.wait(timeout=WAIT_S)
    try:
        assert [response.status_code for response in responses] == [200] * in_flight
        assert code == 0, web.log_text()[-3000:]
        ids = [response.json()["id"] for response in responses]
        written = rows(cluster, "SELECT id FROM routing_replayrecord WHERE id = ANY(%s)", [ids])
        assert sorted(row[0] for row in written) == sorted(ids), web.log_text()[-3000:]
    finally:
        cluster.parts.pop("web", None)
        cluster.start_web()
