"""Section 11: the context a lazy RAG source saves, in process.

The demo tenant's ``support`` route as the benchmarks measure it (``SUPPORT_ROUTE_CORE``), and a copy whose ``docs``
source is ``lazy: true``, each resolved as the gateway resolves (``serves_tools``: the lazy source
becomes a ``search_docs`` tool instead of being fetched), for the same questions, unrecorded. What
is compared is the size of the request the model receives first (``tokens.after``, the platform's
count) and the resolve's time; for a question that needs the documents the lazy route pays one
served search (timed here: the source run for the question, as the gateway serves the model's
call) and one more model call (the model's time, not measured here). The bench's route is removed
afterwards.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import (
    DEMO_TENANT,
    demo_tenant,
    ensure_demo_documents,
    log,
)
from scripts.bench_stats import Sizes, summarize
from scripts.report import (
    Check,
    check_rows,
    print_checks,
    quick_note,
    summary_table,
    table,
    write_section,
)

# The demo route as written (its judge keeps at most 3 documents scoring 0.15 or more), and the
# same route retrieving as a plain top-k RAG does (the 6 nearest documents, no judge).
SCENARIOS = {
    "demo route as written": None,
    "demo route, plain top-6 retrieval": {"recall": {"top_k": 6, "min_similarity": 0.0}},
}
QUESTIONS = (
    "Can I get a refund for my headphones?",
    "How long does standard shipping take to Norway?",
    "My headphones crackle on the left side, is that covered?",
    "Hi! Can you help me with my order?",
    "Thanks, that is all.",
)
START, END = "<!-- lazy:start -->", "<!-- lazy:end -->"


FULL_SIZES = Sizes(rounds=200, warmup=10)
QUICK_SIZES = Sizes(rounds=20, warmup=3)


@dataclass
class LazyResults:
    date: str
    quick: bool
    sizes: Sizes
    # scenario → question → "eager" / "lazy" → tokens.after of the request the model gets first
    tokens: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    resolve_ms: dict[str, list[float]] = field(default_factory=lambda: {"eager": [], "lazy": []})
    search_ms: list[float] = field(default_factory=list)
    search_tokens: dict[str, int] = field(default_factory=dict)  # question → the tool's answer
    tools_offered: bool = False
    load_average: str = ""
    runtime_s: float = 0.0

    def saved(self, scenario: str, question: str) -> int:
        counts = self.tokens[scenario][question]
        return counts["eager"] - counts["lazy"]

    def share(self, scenario: str, question: str) -> str:
        eager = self.tokens[scenario][question]["eager"]
        return f"{self.saved(scenario, question) / eager * 100:.0f} %" if eager else "-"


def route_named(name: str, match: dict[str, Any] | None, lazy: bool) -> dict[str, Any]:
    from contextplatform.demo.defaults import SUPPORT_ROUTE_CORE

    route = copy.deepcopy(SUPPORT_ROUTE_CORE)
    route["name"] = name
    for source in route["context"]["sources"]:
        if source["type"] == "rag":
            source["lazy"] = lazy
            if match is not None:
                source["match"] = match
    return route


def route_names() -> dict[tuple[str, str], str]:
    return {
        (scenario, setting): f"bench-lazy-{index}-{setting}"
        for index, scenario in enumerate(SCENARIOS)
        for setting in ("eager", "lazy")
    }


def prepare() -> Any:
    from django_tenants.utils import schema_context

    from contextplatform.routes.models import Route
    from contextplatform.routes.services import create_route, prepare_route

    tenant = demo_tenant("lazy")
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("lazy")
        names = route_names()
        Route.objects.filter(name__in=names.values()).delete()
        for (scenario, setting), name in names.items():
            written = route_named(name, SCENARIOS[scenario], lazy=setting == "lazy")
            prepared = prepare_route(written)
            create_route(spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe)
    return tenant


def resolve_once(tenant: Any, route: str, question: str) -> Any:
    from contextplatform.resolve.modes import PREVIEW
    from contextplatform.resolve.pipeline import ResolveRequest, resolve

    return resolve(
        ResolveRequest(
            tenant_schema=tenant.schema_name,
            route=route,
            user="u_123",
            request_body={"model": "m", "messages": [{"role": "user", "content": question}]},
            chat_format="openai",
            allowlist=tuple(tenant.outbound_allowlist),
            serves_tools=True,
        ),
        PREVIEW,
    ).resolution


def run_lazy(quick: bool) -> LazyResults:
    from django_tenants.utils import schema_context

    from contextplatform.core.estimation import default_estimator
    from contextplatform.resolve.use_cases import search_source
    from contextplatform.routes.models import Route

    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = LazyResults(date=utc_now(), quick=quick, sizes=sizes)
    started = time.perf_counter()
    tenant = prepare()
    names = route_names()
    first = next(iter(SCENARIOS))
    try:
        with schema_context(DEMO_TENANT):
            for scenario in SCENARIOS:
                results.tokens[scenario] = {
                    question: {
                        setting: resolve_once(
                            tenant, names[(scenario, setting)], question
                        ).tokens_after
                        for setting in ("eager", "lazy")
                    }
                    for question in QUESTIONS
                }
            log(f"lazy: {sizes.rounds} rounds of {len(QUESTIONS)} questions on both routes …")
            for round_index in range(sizes.warmup + sizes.rounds):
                measured = round_index >= sizes.warmup
                for question in QUESTIONS:
                    for setting in ("eager", "lazy"):
                        begun = time.perf_counter()
                        resolution = resolve_once(tenant, names[(first, setting)], question)
                        if measured:
                            results.resolve_ms[setting].append((time.perf_counter() - begun) * 1000)
                    results.tools_offered = "search_docs" in resolution.lazy_tools
                    if not measured or not results.tools_offered:
                        continue
                    (source,) = resolution.lazy_tools.values()
                    assert resolution.context_request is not None
                    begun = time.perf_counter()
                    searched = search_source(
                        source, question, resolution.context_request, default_estimator()
                    )
                    results.search_ms.append((time.perf_counter() - begun) * 1000)
                    results.search_tokens[question] = default_estimator().count(searched.content)
    finally:
        with schema_context(DEMO_TENANT):
            Route.objects.filter(name__in=names.values()).delete()
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


def lazy_checks(results: LazyResults) -> list[Check]:
    checks = []
    for scenario in SCENARIOS:
        saved = [results.saved(scenario, q) for q in QUESTIONS]
        checks.append(
            Check(
                f"tokens the first call carries, lazy vs eager: {scenario}",
                "reported (no target); the lazy route offers search_docs",
                f"saved per request: {min(saved)} to {max(saved)} tokens "
                f"(mean {sum(saved) / len(saved):.0f})",
                results.tools_offered,
            )
        )
    return checks


def lazy_section(results: LazyResults, commit: str) -> str:
    lines = [
        START,
        "",
        "## 11. Lazy retrieval: the context a lazy RAG source saves (in process)",
        "",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_lazy.py`; `BENCH_ONLY=lazy make bench` refreshes this section alone. "
        f"Load average at the end of the run: {results.load_average}." + quick_note(results.quick),
        "",
        table(["check", "target", "measured", "result"], check_rows(lazy_checks(results))),
        "",
        "The demo's `support` route (guardrails, profile, history, the `docs` RAG source over "
        "`support-kb`) and a copy whose `docs` source is `lazy: true`, resolved as the gateway "
        "resolves them (the lazy source offered as a `search_docs` tool, not fetched), for user "
        "`u_123` without a session, unrecorded. *tokens.after* is the size of the request the "
        "model receives first, as the platform counts it. A question that needs the documents then "
        "costs the lazy route one served search (below: the source run for the question, as the "
        "gateway serves the call, whose answer the follow-up carries) and one more model call.",
        "",
        *[
            part
            for scenario in SCENARIOS
            for part in (
                f"**{scenario}**",
                "",
                table(
                    ["question", "eager: tokens.after", "lazy: tokens.after", "saved"],
                    [
                        [
                            q,
                            str(results.tokens[scenario][q]["eager"]),
                            str(results.tokens[scenario][q]["lazy"]),
                            f"{results.saved(scenario, q)} ({results.share(scenario, q)})",
                        ]
                        for q in QUESTIONS
                    ],
                ),
                "",
            )
        ],
        "What a served `search_docs` call answers (the demo route as written), in tokens: "
        + ", ".join(f"{results.search_tokens.get(q, '-')}" for q in QUESTIONS)
        + ".",
        "",
        "### Time (ms)",
        "",
        summary_table(
            [
                ("resolve, eager route", summarize(results.resolve_ms["eager"])),
                ("resolve, lazy route", summarize(results.resolve_ms["lazy"])),
                ("a served search_docs call", summarize(results.search_ms)),
            ]
        ),
        "",
        END,
    ]
    return "\n".join(lines)


def write_lazy(results: LazyResults, docs_dir: Path, commit: str) -> list[Path]:
    return [write_section(docs_dir, lazy_section(results, commit), START, END)]


def print_lazy(results: LazyResults) -> None:
    print()
    print("Lazy retrieval (demo route, in process)")
    for scenario in SCENARIOS:
        print(f"  {scenario}")
        for question in QUESTIONS:
            counts = results.tokens[scenario][question]
            print(f"    {counts['eager']:6d} -> {counts['lazy']:6d} tokens  {question}")
    print_checks(lazy_checks(results))
