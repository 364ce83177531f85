"""Tracing's cost on the resolve path, in process: the bench route resolved with OpenTelemetry
export on (``OTEL_EXPORTER_OTLP_ENDPOINT`` at an OTLP/HTTP receiver on loopback, in this process's
own thread) and off (no provider: ``contextplatform.core.tracing``'s helpers return at once), in the
same run. Both settings run in every round, in a fresh seeded random order, so drift and other
load fall on both alike; the spans are flushed after each traced resolve (the batch processor's
export is part of the cost counted in CPU, not in the resolve's wall time, which it does not
wait on)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_resolver import resolve_bench
from scripts.bench_setup import (
    BENCH_TENANT,
    bench_route,
    clear_bench_replay,
    ensure_tenant,
    log,
    save_routes,
)
from scripts.bench_stats import Summary, summarize

ROUTE = "bench-tracing"
SOURCE_SLEEPS_MS = (1.0, 1.0, 1.0, 1.0)
SETTINGS = ("off", "on")
SEED = 11


@dataclass(frozen=True)
class Sizes:
    rounds: int
    warmup: int


FULL_SIZES = Sizes(rounds=1000, warmup=50)
QUICK_SIZES = Sizes(rounds=100, warmup=10)


@dataclass
class TracingResults:
    date: str
    quick: bool
    sizes: Sizes
    wall: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SETTINGS})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SETTINGS})
    exports: int = 0
    exported_bytes: int = 0
    load_average: str = ""
    runtime_s: float = 0.0

    def summary(self, setting: str, measure: str = "wall") -> Summary:
        return summarize(getattr(self, measure)[setting])


class Receiver:
    """Counts what the exporter sends (requests, bytes); answers 200 with an empty response."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        self.lock = threading.Lock()


@contextmanager
def receiving() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            with receiver.lock:
                receiver.exports += 1
                receiver.bytes += len(body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def providers(endpoint: str) -> Iterator[dict[str, Any]]:
    """The module's state with tracing on (a provider exporting to ``endpoint``) and off."""
    from opentelemetry import trace

    from contextplatform.core import tracing

    previous = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    try:
        provider = tracing.configure()
        assert provider is not None
        on = (tracing._state.provider, tracing._state.tracer)
    finally:
        if previous is None:
            os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        else:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = previous
    off = (None, trace.NoOpTracer())
    try:
        yield {"on": on, "off": off}
    finally:
        tracing._state.provider, tracing._state.tracer = on
        tracing.shutdown()


def timed(setting: str, states: dict[str, Any], provider: Any) -> tuple[float, float]:
    """Wall ms of one recorded resolve with tracing ``setting``, and the CPU ms it cost the
    process (its export flushed, for the traced one)."""
    from django_tenants.utils import schema_context

    from contextplatform.core import tracing
    from contextplatform.replay.writer import REPLAY_WRITER

    tracing._state.provider, tracing._state.tracer = states[setting]
    cpu_started = time.process_time()
    with schema_context(BENCH_TENANT):
        wall_ms = resolve_bench(ROUTE)[1]
    if setting == "on":
        provider.force_flush()
    REPLAY_WRITER.flush()
    return wall_ms, (time.process_time() - cpu_started) * 1000


def run_tracing(quick: bool) -> TracingResults:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = TracingResults(date=utc_now(), quick=quick, sizes=sizes)
    ensure_tenant(BENCH_TENANT)
    save_routes([bench_route(ROUTE, list(SOURCE_SLEEPS_MS))])
    clear_bench_replay()
    log(f"tracing overhead: {sizes.rounds} rounds x on/off …")
    order = random.Random(SEED)
    with receiving() as (endpoint, receiver), providers(endpoint) as states:
        provider = states["on"][0]
        for index in range(sizes.warmup + sizes.rounds):
            for setting in order.sample(list(SETTINGS), len(SETTINGS)):
                wall_ms, cpu_ms = timed(setting, states, provider)
                if index >= sizes.warmup:
                    results.wall[setting].append(wall_ms)
                    results.cpu[setting].append(cpu_ms)
    results.exports, results.exported_bytes = receiver.exports, receiver.bytes
    clear_bench_replay()
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
