"""Section 10: what pre-warm saves on the demo route's resolve, in process.

The demo tenant's ``support`` route as ``bootstrap_demo`` writes it (guardrails, the profile and
history of user ``u_123``, the ``support-kb`` documents), resolved with the demo question by
``pipeline.resolve()`` (recorded, as ``POST /api/v1/resolve`` runs it) in a session of the bench's
own holding a copy of the demo session's messages. Two settings, in a fresh seeded random order in
every round: **cold**, the session's pre-warm invalidated first (so the resolve also pays the
pre-warm lookup that finds nothing usable), and **pre-warmed**, the session pre-warmed first
(``prewarm_session``, as ``POST /api/v1/sessions/{session}/prewarm`` runs it; timed apart).
Nothing between the two is left for the next: the replay writer is drained after each resolve.
The bench's session and replay records are removed afterwards.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import (
    DEMO_TENANT,
    copy_demo_session,
    demo_tenant,
    ensure_demo_documents,
    log,
)
from scripts.bench_stats import Sizes, Summary, summarize

SESSION = "s_bench_prewarm"
SETTINGS = ("cold", "prewarmed")
PREWARMED = frozenset({"profile", "history"})  # what the demo route's pre-warm serves
SEED = 11


FULL_SIZES = Sizes(rounds=1000, warmup=50)
QUICK_SIZES = Sizes(rounds=100, warmup=10)


@dataclass
class PrewarmResults:
    date: str
    quick: bool
    sizes: Sizes
    cache: str
    route_sources: list[str] = field(default_factory=list)
    wall: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SETTINGS})
    # Each source's own fetch ms (the outcome's ``ms``), per setting.
    source_ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    prewarm_ms: list[float] = field(default_factory=list)
    mismatches: int = 0  # pre-warmed resolves that did not serve exactly PREWARMED (cold: any)
    load_average: str = ""
    runtime_s: float = 0.0

    def summary(self, setting: str) -> Summary:
        return summarize(self.wall[setting])

    def saved(self) -> list[float]:
        """Cold minus pre-warmed, round by round (the two ran next to each other)."""
        return [c - w for c, w in zip(self.wall["cold"], self.wall["prewarmed"], strict=True)]


def cache_backend() -> str:
    from django.conf import settings

    backend = settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]
    location = settings.CACHES["default"].get("LOCATION")
    return f"{backend} ({location})" if location else backend


def prepare() -> Any:
    """The demo tenant (bootstrapped if missing), its documents, the bench's session."""
    from django_tenants.utils import schema_context

    tenant = demo_tenant("prewarm")
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("prewarm")
        copy_demo_session(SESSION)
    return tenant


def clean() -> int:
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER
    from sources.models import ChatSession
    from sources.prewarm import invalidate_prewarm

    REPLAY_WRITER.flush()
    with schema_context(DEMO_TENANT):
        removed, _ = ReplayRecord.objects.filter(session_key=SESSION).delete()
        ChatSession.objects.filter(key=SESSION).delete()
        invalidate_prewarm(DEMO_TENANT, session=SESSION)
    return removed


def recorded_only() -> Any:
    """The live mode without the turn's start: a session write would invalidate the pre-warm the
    next round measures."""
    from dataclasses import replace

    from contextplatform.resolve.modes import LIVE

    return replace(LIVE, name="bench_recorded", touches=LIVE.touches - {"session", "memory_write"})


def one_round(tenant: Any, setting: str, results: PrewarmResults, record: bool) -> None:
    from contextplatform.demo.defaults import DEMO_RESOLVE_BODY, DEMO_ROUTE, DEMO_USER
    from contextplatform.replay.writer import REPLAY_WRITER
    from contextplatform.resolve.pipeline import ResolveRequest, resolve
    from contextplatform.resolve.use_cases import prewarm_session
    from sources.prewarm import invalidate_prewarm

    invalidate_prewarm(DEMO_TENANT, session=SESSION)  # nothing of the round before serves this one
    if setting == "prewarmed":
        started = time.perf_counter()
        prewarm_session(tenant=tenant, route_name=DEMO_ROUTE, user=DEMO_USER, session=SESSION)
        if record:
            results.prewarm_ms.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    resolution = resolve(
        ResolveRequest(
            tenant_schema=DEMO_TENANT,
            route=DEMO_ROUTE,
            user=DEMO_USER,
            session=SESSION,
            request_body=DEMO_RESOLVE_BODY["request"],
            capture_content=tenant.capture_content,
            allowlist=tuple(tenant.outbound_allowlist),
        ),
        recorded_only(),
    ).resolution
    wall_ms = (time.perf_counter() - started) * 1000
    REPLAY_WRITER.flush()  # off the resolve path; not into the next one
    if any(o.failed for o in resolution.outcomes):
        raise RuntimeError(f"a demo source failed: {resolution.source_reports()}")
    expected = PREWARMED if setting == "prewarmed" else frozenset()
    if not record:
        return
    results.mismatches += resolution.prewarmed != expected
    results.wall[setting].append(wall_ms)
    for outcome in resolution.outcomes:
        per_setting = results.source_ms.setdefault(outcome.name, {s: [] for s in SETTINGS})
        per_setting[setting].append(outcome.ms)


def run_prewarm(quick: bool) -> PrewarmResults:
    from django_tenants.utils import schema_context

    from contextplatform.demo.defaults import DEMO_ROUTE
    from contextplatform.routes.selectors import loaded_route

    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = PrewarmResults(date=utc_now(), quick=quick, sizes=sizes, cache=cache_backend())
    tenant = prepare()
    order = random.Random(SEED)
    log(f"prewarm: {sizes.rounds} rounds x {len(SETTINGS)} settings of the demo route …")
    try:
        with schema_context(DEMO_TENANT):
            spec = loaded_route(DEMO_ROUTE).spec
            results.route_sources = [f"{s.name} ({s.type})" for s in spec.context.sources]
            for index in range(sizes.warmup + sizes.rounds):
                for setting in order.sample(list(SETTINGS), len(SETTINGS)):
                    one_round(tenant, setting, results, record=index >= sizes.warmup)
    finally:
        removed = clean()
        log(f"prewarm: removed the bench session and its {removed} replay records")
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
