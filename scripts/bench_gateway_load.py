"""The gateway benchmark's load client when ``wrk`` cannot be had: CLIENTS keep-alive connections
(one ``httpx.AsyncClient`` each) posting the same body for a fixed time, in a process of its own so
that it shares no interpreter lock with the bench. Prints one JSON line with what ``wrk``'s
script prints: requests, duration, errors by kind, latency p50/p99 in microseconds.

``python -m scripts.bench_gateway_load --url URL --body FILE --header 'name: value' ... --clients 32
--seconds 10``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np


@dataclass
class Sessions:
    """A new ``x-session-id`` every ``calls`` requests (all clients together), when asked for."""

    prefix: str | None
    calls: int
    made: int = 0

    def headers(self) -> dict[str, str]:
        self.made += 1
        if self.prefix is None:
            return {}
        return {"x-session-id": f"{self.prefix}{self.made // self.calls}"}


async def worker(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    deadline: float,
    latencies: list[float],
    errors: dict[str, int],
    sessions: Sessions,
) -> None:
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            response = await client.post(url, content=body, headers=sessions.headers())
        except httpx.TimeoutException:
            errors["timeout"] += 1
            continue
        except httpx.HTTPError:
            errors["read"] += 1
            continue
        latencies.append(time.perf_counter() - started)
        if response.status_code >= 400:
            errors["status"] += 1


async def run(
    url: str,
    body: bytes,
    headers: dict[str, str],
    clients: int,
    seconds: float,
    sessions: Sessions,
) -> dict[str, int]:
    latencies: list[float] = []
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    connections = [
        httpx.AsyncClient(headers=headers, timeout=30.0, limits=limits) for _ in range(clients)
    ]
    try:
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(
            *(worker(c, url, body, deadline, latencies, errors, sessions) for c in connections)
        )
        duration = time.perf_counter() - started
    finally:
        await asyncio.gather(*(c.aclose() for c in connections))
    p50, p99 = np.percentile(latencies, [50, 99]) if latencies else (0.0, 0.0)
    return {
        "requests": len(latencies) + errors["read"] + errors["timeout"],
        "duration_us": int(duration * 1e6),
        **errors,
        "p50_us": int(p50 * 1e6),
        "p99_us": int(p99 * 1e6),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True, type=Path)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--session-prefix", default=None)
    parser.add_argument("--session-calls", type=int, default=8)
    args = parser.parse_args(argv)
    headers = dict(h.split(": ", 1) for h in args.header)
    sessions = Sessions(args.session_prefix, args.session_calls)
    summary = asyncio.run(
        run(args.url, args.body.read_bytes(), headers, args.clients, args.seconds, sessions)
    )
    print("LOAD_JSON " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
