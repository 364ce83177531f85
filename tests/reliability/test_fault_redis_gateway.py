"""Redis restarted while the gateway is under load: chat calls (plain and streamed, each with a
session and a budget) keep answering while Redis is down and after it is back; the rate limit,
counted in Redis, lets calls through while it cannot count (the direction docs/deploy.md states),
the session budgets (PostgreSQL) hold and release every reservation; every call answered 200 has
its replay record and its turn written in its session.

The rate limit is on, high enough never to refuse here: each call asks Redis to count it. What the
outage costs is printed (calls that failed, latency before, during and after)."""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from contextplatform.demo.defaults import DEMO_DEPLOYMENT
from scripts.cluster import Cluster
from tests.reliability.test_faults import WAIT_S, fresh, rows, until

pytestmark = pytest.mark.reliability

CLUSTER_ENV = {"API_RATE_LIMIT_PER_MINUTE": "1000000"}
ROUTE = "faults-redis-gateway"
SESSION_BUDGET = 10_000_000
LET_THROUGH = "the rate limit's cache failed; request let through"


@dataclass
class Call:
    phase: str
    stream: bool
    session: str
    status: int | str
    seconds: float
    resolve_id: str = ""


@dataclass
class Load:
    """Gateway calls from a few clients until stopped, each tagged with the phase it began in."""

    cluster: Cluster
    run: str
    phase: str = "before"
    calls: list[Call] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def body(self, stream: bool) -> dict[str, Any]:
        return {
            "model": ROUTE,
            "stream": stream,
            "messages": [{"role": "user", "content": "Where is my parcel?"}],
        }

    def call(self, client: httpx.Client, number: int) -> Call:
        stream = number % 2 == 1
        session = f"redis-gw-{self.run}-{number}"
        headers = {"x-session-id": session, "x-user-id": f"redis-gw-{self.run}"}
        phase, started = self.phase, time.monotonic()
        try:
            with client.stream(
                "POST", "/v1/chat/completions", json=self.body(stream), headers=headers
            ) as answered:
                text = answered.read().decode()
                status: int | str = answered.status_code
                if status == 200 and not stream:
                    assert json.loads(text)["choices"], text
                if status == 200 and stream:
                    assert "data: [DONE]" in text, text
                resolve_id = answered.headers.get("x-context-resolve-id", "")
        except httpx.HTTPError as error:
            status, resolve_id = type(error).__name__, ""
        return Call(phase, stream, session, status, time.monotonic() - started, resolve_id)

    def client_loop(self, offset: int) -> None:
        headers = {"Authorization": f"Bearer {self.cluster.api_key}"}
        with httpx.Client(base_url=self.cluster.base_url, headers=headers, timeout=60) as client:
            number = offset
            while not self.stop.is_set():
                self.calls.append(self.call(client, number))
                number += 4

    def of(self, phase: str) -> list[Call]:
        return [call for call in self.calls if call.phase == phase]


def median_ms(calls: list[Call]) -> float:
    return round(statistics.median(call.seconds for call in calls) * 1000, 1) if calls else 0.0


def test_redis_restarted_under_gateway_load_calls_answer_nothing_acknowledged_is_lost(
    cluster: Cluster,
) -> None:
    route = {
        "name": ROUTE,
        "model": {"name": "stand-in", "upstream": DEMO_DEPLOYMENT},
        "context": {
            "sources": [{"type": "skill_guardrails", "texts": ["Answer in one sentence."]}],
            "budget": {"session_max_tokens": SESSION_BUDGET},
        },
    }
    created = fresh(cluster, "POST", "/api/v1/routes", route)
    assert created.status_code == 201, created.text
    web_log = cluster.parts["web"].log
    log_from = web_log.stat().st_size

    load = Load(cluster, uuid.uuid4().hex[:6])
    clients = [threading.Thread(target=load.client_loop, args=(offset,)) for offset in range(4)]
    for client in clients:
        client.start()
    try:
        until(lambda: len(load.of("before")) >= 20, what="gateway calls before the outage")
        cluster.stop_redis()
        load.phase = "down"
        until(lambda: len(load.of("down")) >= 40, what="gateway calls with Redis down")
        cluster.start_redis()  # the same port and data folder
        load.phase = "after"
        until(lambda: len(load.of("after")) >= 40, what="gateway calls after the restart")
    finally:
        load.stop.set()
        for client in clients:
            client.join(timeout=WAIT_S)

    summary = {
        phase: {
            "calls": len(load.of(phase)),
            "failed": sum(1 for call in load.of(phase) if call.status != 200),
            "median_ms": median_ms(load.of(phase)),
        }
        for phase in ("before", "down", "after")
    }
    print(f"\ngateway under a Redis restart: {summary}")
    assert {call.status for call in load.calls} == {200}, [
        (call.phase, call.status) for call in load.calls if call.status != 200
    ]
    assert {call.stream for call in load.of("down")} == {False, True}

    # The rate limit could not count while Redis was down and let each of those calls through.
    let_through = web_log.read_bytes()[log_from:].decode(errors="replace").count(LET_THROUGH)
    assert let_through >= len(load.of("down")) // 2, let_through

    ids = [call.resolve_id for call in load.calls]
    assert all(ids) and len(set(ids)) == len(ids)

    def records_missing() -> int:
        sql = "SELECT count(*) FROM routing_replayrecord WHERE id = ANY(%s)"
        return len(ids) - int(rows(cluster, sql, [ids])[0][0])

    until(lambda: records_missing() == 0, what=f"every replay record ({records_missing()} missing)")
    sql = (
        "SELECT resolve_id, count(*) FILTER (WHERE role = 'user'), "
        "count(*) FILTER (WHERE role = 'assistant') FROM sources_chatmessage "
        "WHERE resolve_id = ANY(%s) GROUP BY resolve_id"
    )
    turns = {
        resolve_id: (users, answers) for resolve_id, users, answers in rows(cluster, sql, [ids])
    }
    assert {i: turns.get(i) for i in ids if turns.get(i) != (1, 1)} == {}  # each turn, once

    sessions = [call.session for call in load.calls]
    spend = rows(
        cluster,
        "SELECT session_key, spent, reserved FROM routing_sessionspend WHERE session_key = ANY(%s)",
        [sessions],
    )
    assert len(spend) == len(sessions)
    # Every reservation was settled or released (none left held by the outage), and spent.
    assert [(key, spent, reserved) for key, spent, reserved in spend if reserved or not spent] == []
