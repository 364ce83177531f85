"""The resolve pipeline, one for every entry point: ``resolve(request, mode)`` runs plan → fetch →
pack → inject → compress → record, and the mode (``modes.py``) decides which stages run and what
they may touch, checked here where each stage or side effect happens.

``context_request`` is the one place a ``ContextRequest`` (what the sources read) is built.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from opentelemetry.trace import Span

from compression.config import CompressConfig
from contextplatform.core import metrics, tracing
from contextplatform.core.errors import ApiError
from contextplatform.core.estimation import TokenEstimator, count_json, default_estimator
from contextplatform.deployments.models import Deployment
from contextplatform.protocols.prompt_cache import with_cache_markers
from contextplatform.protocols.registry import PROTOCOLS
from contextplatform.replay.ids import new_resolve_id
from contextplatform.resolve import live_events
from contextplatform.resolve.arms import MAIN, arm_for, caller_key
from contextplatform.resolve.budget import Budget, plan_budget
from contextplatform.resolve.chat import ChatFormat, ChatRequest, parse_chat_request
from contextplatform.resolve.compression_stage import StageOutcome, run_compression
from contextplatform.resolve.estimators import EstimatorChoice, estimator_for
from contextplatform.resolve.injection import SourceBlock, inject, injected_call_ids
from contextplatform.resolve.lazy_sources import lazy_sources, offer_search_tools
from contextplatform.resolve.modes import Mode
from contextplatform.resolve.packing import PackDecision, pack
from contextplatform.resolve.prewarm import Prewarmed, prewarm_all
from contextplatform.resolve.prewarmed import with_prewarmed
from contextplatform.resolve.refusals import context_length_exceeded
from contextplatform.resolve.resolver import (
    Resolution,
    build_sources,
    lazy_outcome,
    route_deployment,
    save_replay,
    signal_query,
)
from contextplatform.resolve.turns import begin_turn
from contextplatform.routes.configuration.schema import BudgetConfig, RouteSpec
from contextplatform.routes.selectors import LoadedRoute, loaded_route
from sources.base import ContextRequest, ContextSource, ResolvedTurn
from sources.fetch import SourceOutcome, fetch_all_from_thread
from sources.prewarm import fingerprint, generations, store


@dataclass(frozen=True)
class CompressionInputs:
    """What the compression preview plans and compresses with, instead of a route's model and
    context blocks: a compress block (None: nothing is compressed), its budget, the window."""

    config: CompressConfig | None
    budget: BudgetConfig
    context_window: int
    max_output_tokens: int | None


@dataclass(frozen=True)
class ResolveRequest:
    """One request to run through the pipeline, as an entry point received it."""

    tenant_schema: str
    route: str = ""
    request_body: dict[str, Any] | None = None
    user: str | None = None
    session: str | None = None
    chat_format: ChatFormat | None = None
    capture_content: bool = False
    allowlist: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    # The request's say on the memory write: True asks for it, False opts out, None is silent.
    store_memory: bool | None = None
    # The route, when the entry point already read it (the gateway checks its deployment first).
    loaded: LoadedRoute | None = None
    # A draft configuration run instead of the route's saved one (a rerun against a draft).
    spec: RouteSpec | None = None
    # The entry point answers the model's calls of the platform's own tools (the gateway).
    serves_tools: bool = False
    # The record is built but left in ``pending_replay`` for the caller to complete (the gateway).
    defer_replay: bool = False
    # The sources' query itself, when there is no chat body (the RAG preview, a lazy search).
    query: str | None = None
    # Read history and memories as they stood then (a rerun of a recorded request).
    as_of: datetime | None = None
    # A lazy search: the source searched, the resolve's request it serves, and its estimator.
    source: ContextSource | None = None
    base: ContextRequest | None = None
    estimator: TokenEstimator | None = None
    # The compression preview's own compress block and budget (no route needed).
    compression: CompressionInputs | None = None
    # The request as the entry point already parsed it (the gateway): not parsed again.
    chat: ChatRequest | None = None
    # The arm of the route's traffic split to run when the mode does not choose one (a rerun:
    # the record's); None or an arm the route no longer has: the route's own context.
    variant: str | None = None
    # The API key that made the call (the replay record's ``key_id``: spend per key).
    key_id: int | None = None


@dataclass
class Run:
    """What the pipeline did: the parts its mode's stages produced."""

    mode: Mode
    request: ContextRequest | None = None
    sources: list[ContextSource] = field(default_factory=list)
    outcomes: list[SourceOutcome] = field(default_factory=list)
    # A full resolve (live, preview, rerun).
    resolution: Resolution | None = None
    # Prewarm: each chosen source's line.
    prewarmed: list[Prewarmed] = field(default_factory=list)
    # Compression preview: the plan and the stage's outcome, or the overflow it reported.
    budget: Budget | None = None
    tokens_before: int = 0
    compression: StageOutcome | None = None
    overflow: ApiError | None = None


class Clock:
    """The stage clock, when the mode may count metrics."""

    def __init__(self, mode: Mode):
        self.clock = metrics.StageClock() if mode.may("metrics") else None

    def lap(self, stage: str) -> None:
        if self.clock is not None:
            self.clock.lap(stage)

    def restart(self) -> None:
        if self.clock is not None:
            self.clock.restart()


def context_request(
    request: ResolveRequest,
    mode: Mode,
    *,
    request_id: str,
    route: str,
    query: str,
    chat: ChatRequest | None = None,
    judge_deployment: str | None = None,
) -> ContextRequest:
    """The one place a ``ContextRequest`` is built; the mode decides what its sources may touch
    (the RAG cache, a memory's strength, the source metrics)."""
    if request.base is not None:  # a lazy search: the resolve's own request, asked anew
        return replace(request.base, query=query)
    return ContextRequest(
        request_id=request_id,
        tenant=request.tenant_schema,
        route=route,
        user=request.user,
        session=request.session,
        query=query,
        turns=chat.turns if chat is not None else (),
        allowlist=tuple(request.allowlist),
        use_cache=mode.may("caches"),
        dry_run=not mode.may("memory_strength"),
        judge_deployment=judge_deployment,
        judge_calls=mode.calls_judge,
        as_of=request.as_of,
        observed=mode.may("metrics"),
    )


def the_route(request: ResolveRequest) -> tuple[str, RouteSpec, Deployment | None]:
    """The route's name, the configuration run (a draft's when given) and its deployment."""
    if request.spec is not None:
        return request.route, request.spec, route_deployment(request.spec, None)
    loaded = request.loaded or loaded_route(request.route)
    return loaded.route.name, loaded.spec, route_deployment(loaded.spec, loaded.deployment)


def the_arm(
    request: ResolveRequest, mode: Mode, route: str, spec: RouteSpec, request_id: str
) -> tuple[str, RouteSpec]:
    """The arm of the route's traffic split this request runs, once per request before any source
    is fetched, and the configuration it runs: a variant's context instead of the route's own."""
    if mode.splits_traffic:
        key = caller_key(request.user, request.session, request_id)
        arm = arm_for(route, key, [(v.name, v.weight) for v in spec.variants])
    else:
        arm = request.variant or MAIN
    variant = spec.variant(arm)
    if variant is None:
        return MAIN, spec
    return arm, spec.model_copy(update={"context": variant.context})


def resolve(request: ResolveRequest, mode: Mode) -> Run:
    """Run ``request`` through the stages ``mode`` runs."""
    if mode.runs("plan") and mode.runs("fetch"):
        return full_resolve(request, mode)
    if mode.runs("plan"):
        return compression_only(request, mode)
    return fetch_only(request, mode)


def fetch_only(request: ResolveRequest, mode: Mode) -> Run:
    """The fetch stage alone: one source searched, the previewable sources recalled and judged,
    or the prewarmable ones read ahead."""
    if request.source is not None and mode.sources == "given":
        sources = [request.source]
        spec = None
        route = request.route
    else:
        route, spec, _ = the_route(request)
        sources = build_sources(spec)
    if mode.sources == "previewable":
        sources = [s for s in sources if s.previewable]
    elif mode.sources == "prewarmable":
        assert spec is not None
        sources = [s for s in sources if s.settings.enabled] if spec.context.enabled else []
    prefix = "pwm_" if mode.reads_ahead else "pvw_"
    context = context_request(
        request,
        mode,
        request_id=prefix + secrets.token_hex(12 if mode.reads_ahead else 8),
        route=route,
        query=request.query or "",
        judge_deployment=spec.model.primary_upstream if spec is not None else None,
    )
    run = Run(mode=mode, request=context, sources=sources)
    if mode.reads_ahead:
        run.prewarmed = read_ahead(request, mode, sources, context)
    else:
        run.outcomes = fetch_all_from_thread(sources, context, request.estimator)
    return run


def read_ahead(
    request: ResolveRequest, mode: Mode, sources: list[ContextSource], context: ContextRequest
) -> list[Prewarmed]:
    """The prewarmable sources read now, what they read kept in the session's pre-warm cache."""
    user, session, schema = request.user, request.session, request.tenant_schema
    assert user is not None and session is not None
    # Read before the fetch: a write landing while the sources read invalidates what they read.
    read_under = generations(schema, user, session)
    chosen = [s for s in sources if s.prewarmable]
    lines: list[Prewarmed] = async_to_sync(prewarm_all)(chosen, context)
    states = {fingerprint(line.source): line.state for line in lines if line.status == "prewarmed"}
    if states and mode.may("caches"):
        store(schema=schema, user=user, session=session, read_under=read_under, states=states)
    return lines


def compression_only(request: ResolveRequest, mode: Mode) -> Run:
    """Plan and compress a request as it is (no sources): the compression preview."""
    inputs = request.compression
    assert inputs is not None and request.request_body is not None
    chat = parse_chat_request(request.request_body, request.chat_format, prefix="request_body")
    estimator = default_estimator()
    tokens = count_json(chat.body, estimator)
    budget = plan_budget(
        context_window=inputs.context_window,
        max_tokens_setting=inputs.budget.max_tokens,
        reserve_setting=inputs.budget.reserve_output_tokens,
        context_cap=None,
        request_max_tokens=chat.max_tokens,
        route_max_output=inputs.max_output_tokens,
        request_tokens=tokens,
    )
    run = Run(mode=mode, budget=budget, tokens_before=tokens)
    try:
        run.compression = run_compression(
            config=inputs.config,
            body=chat.body,
            chat_format=chat.format,
            budget=budget,
            tokens=tokens,
            estimator=estimator,
            injected={},
            request_id="preview",
            route=request.route,
            user=None,
            headers={},
            persist=mode.may("recovery_blobs"),
            numeric_budget=isinstance(inputs.budget.max_tokens, int),
        )
    except ApiError as error:
        if mode.overflow != "report" or error.code != "context_length_exceeded":
            raise
        run.overflow = error
    return run


def full_resolve(request: ResolveRequest, mode: Mode) -> Run:
    """A whole resolve: live (recorded, the turn started), the admin's preview, or a rerun; in
    its ``resolve`` span when tracing is on."""
    attributes = {"context.tenant": request.tenant_schema, "context.mode": mode.name}
    with tracing.span("resolve", attributes):
        return resolved(request, mode)


def resolved(request: ResolveRequest, mode: Mode) -> Run:
    started = time.perf_counter()
    route_name, spec, deployment = the_route(request)
    protocol = deployment.protocol if deployment is not None else None
    chat = request.chat or parse_chat_request(
        request.request_body,
        request.chat_format,
        protocol=protocol if protocol in PROTOCOLS else None,
    )
    counting: EstimatorChoice = estimator_for(spec, deployment)
    estimator = counting.estimator
    resolution_id = new_resolve_id()
    arm, spec = the_arm(request, mode, route_name, spec, resolution_id)
    tracing.set_attributes(
        {"context.route": route_name, "context.resolve_id": resolution_id, "context.variant": arm}
    )
    tokens_before = count_json(chat.body, estimator)

    # plan
    budget_config = spec.context.budget
    budget = plan_budget(
        context_window=spec.model.context_window,
        max_tokens_setting=budget_config.max_tokens,
        reserve_setting=budget_config.reserve_output_tokens,
        context_cap=budget_config.context_tokens,
        request_max_tokens=chat.max_tokens,
        route_max_output=spec.model.max_output_tokens,
        request_tokens=tokens_before,
    )
    compress = spec.context.compress
    compresses = compress is not None and compress.compresses_request
    if budget.max_input <= 0 or (tokens_before > budget.max_input and not compresses):
        raise context_length_exceeded(tokens_before, budget)
    # Built even when the route's context is off: a kind's after-resolve hook (the memory write)
    # still applies to the turn.
    sources = build_sources(spec)
    context = context_request(
        request,
        mode,
        request_id=resolution_id,
        route=route_name,
        query=signal_query(chat.query, compress, estimator),
        chat=chat,
        judge_deployment=spec.model.primary_upstream,
    )
    clock = Clock(mode)

    # fetch
    offered = (
        lazy_sources(sources, chat.body) if request.serves_tools and spec.context.enabled else {}
    )
    lazy = set(map(id, offered.values()))
    fetched = [s for s in sources if id(s) not in lazy] if spec.context.enabled else []
    prewarmed: frozenset[str] = frozenset()
    if mode.may("caches"):  # the session's pre-warm cache
        fetched, prewarmed = with_prewarmed(fetched, context)
    outcomes = fetch_all_from_thread(fetched, context, estimator)
    outcomes += [lazy_outcome(tool, source) for tool, source in offered.items()]
    clock.lap("fetch")

    # pack
    usable = [o for o in outcomes if o.status == "ok"]
    items = [item for outcome in usable for item in outcome.items]
    decisions, used = pack(items, budget.context)
    budget.used = used
    clock.lap("pack")
    if tracing.enabled():
        trace_fetches(outcomes, decisions)
    if mode.may("live_events"):
        live_events.publish_source_events(request.tenant_schema, route_name, outcomes, decisions)
        clock.restart()

    # inject
    rewritten, injected = injected_body(chat, outcomes, decisions, spec, resolution_id)
    rewritten = offer_search_tools(rewritten, chat.format, offered)
    clock.lap("inject")

    # compress
    with tracing.span("compress") as compress_span:
        stage = run_compression(
            config=compress,
            body=rewritten,
            chat_format=chat.format,
            budget=budget,
            tokens=(injected_tokens := count_json(rewritten, estimator)),
            estimator=estimator,
            injected=injected,
            request_id=resolution_id,
            route=route_name,
            user=request.user,
            headers=request.headers,
            stream=bool(chat.body.get("stream")) and not request.serves_tools,
            persist=mode.may("recovery_blobs"),
            numeric_budget=isinstance(budget_config.max_tokens, int),
            judge_default=spec.model.primary_upstream,
            allowlist=tuple(request.allowlist),
            judge_calls=mode.calls_judge,
        )
        trace_compression(compress_span, stage)
    # Count the body once more only if compression actually replaced it.
    tokens_after = injected_tokens if stage.body is rewritten else count_json(stage.body, estimator)
    clock.lap("compress")
    resolution = Resolution(
        id=resolution_id,
        route=route_name,
        spec=spec,
        chat=chat,
        rewritten=stage.body,
        budget=budget,
        outcomes=outcomes,
        decisions=decisions,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        estimator=estimator.name,
        duration_ms=0.0,
        compression=stage.report,
        sources=sources,
        counting=counting,
        lazy_tools=offered,
        context_request=context,
        prewarmed=prewarmed,
        variant=arm,
    )
    resolution.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    tracing.set_attributes(
        {"context.tokens_before": tokens_before, "context.tokens_after": tokens_after}
    )

    # record
    if mode.runs("record"):
        record(request, mode, resolution)
        clock.lap("replay")
    return Run(
        mode=mode,
        request=context,
        sources=sources,
        outcomes=outcomes,
        resolution=resolution,
        budget=budget,
        tokens_before=tokens_before,
        compression=stage,
    )


def trace_fetches(outcomes: list[SourceOutcome], decisions: list[PackDecision]) -> None:
    """One span per source fetched (none for a disabled or lazy one), timed as it ran, with what
    the pack kept of it."""
    kept: dict[str, int] = {}
    for decision in decisions:
        if decision.kept:
            kept[decision.item.source] = kept.get(decision.item.source, 0) + 1
    for outcome in outcomes:
        if not outcome.ended_at:
            continue
        tracing.finished_span(
            "source.fetch",
            {
                "context.source.type": outcome.type,
                "context.source.name": outcome.name,
                "context.source.status": outcome.status,
                "context.source.items": len(outcome.items),
                "context.source.kept": kept.get(outcome.name, 0),
                "context.source.timeout": outcome.status == "timeout",
                "context.source.latency_ms": outcome.ms,
            },
            started=outcome.started_at,
            ended=outcome.ended_at,
            error=outcome.failed,
        )


def trace_compression(span: Span | None, stage: StageOutcome) -> None:
    """The compress span's figures (counts and the skip reason, nothing of the text)."""
    if span is None:
        return
    report = stage.report
    span.set_attribute("context.compression.applied", bool(report.get("applied")))
    for key in ("tokens_before", "tokens_after"):
        if isinstance(report.get(key), int):
            span.set_attribute(f"context.compression.{key}", report[key])
    if isinstance(report.get("skip_reason"), str):
        span.set_attribute("context.compression.skip_reason", report["skip_reason"])


def injected_body(
    chat: ChatRequest,
    outcomes: list[SourceOutcome],
    decisions: list[PackDecision],
    spec: RouteSpec,
    resolution_id: str,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The request with the kept items injected, and the injected tool calls' ids by kind. A
    source that brought nothing (empty, failed, timed out) is a block without contents: nothing
    of it is injected, but a route keeping its prefix stable still declares its tool."""
    kept_items = {id(d.item) for d in decisions if d.kept}
    blocks = [
        SourceBlock(
            name=o.name,
            type=o.type,
            contents=tuple(
                item.content
                for item in sorted(o.items, key=lambda i: -i.priority)
                if id(item) in kept_items and o.status == "ok"
            ),
        )
        for o in outcomes
        if not o.notes.get("lazy")  # offered as a search tool instead
    ]
    injection_mode = spec.context.injection.mode
    cached = spec.model.prompt_cache
    body = with_cache_markers(chat.body) if cached and chat.format == "anthropic" else chat.body
    rewritten = inject(
        body, chat.format, blocks, injection_mode, resolution_id, stable_tools=cached
    )
    injected = (
        injected_call_ids(chat.format, resolution_id, blocks)
        if injection_mode == "tool_role"
        else {}
    )
    return rewritten, injected


def record(request: ResolveRequest, mode: Mode, resolution: Resolution) -> None:
    """The record stage: the replay record (written now, or left pending for the caller), and,
    for a resolve that is not refused, the turn's start: each kind's after-resolve hook (memory's
    write queued) and the user's message in the session."""
    if mode.may("replay_record"):
        # Through save_replay: the observability bench switches the replay stage off there.
        save_replay(
            resolution,
            tenant_schema=request.tenant_schema,
            user=request.user,
            session=request.session,
            capture_content=request.capture_content,
            defer=request.defer_replay,
            key_id=request.key_id,
        )
    if resolution.refusal() is not None:
        return
    if mode.may("memory_write"):
        turn = ResolvedTurn(
            resolve_id=resolution.id,
            route=resolution.route,
            user=request.user,
            session=request.session,
            user_text=resolution.chat.query,
            store_requested=request.store_memory,
            key_id=request.key_id,
        )
        for source in resolution.sources:
            if source.settings.enabled and source.after_resolve(turn):
                resolution.answer_kinds.append(type(source))
    if mode.may("session") and request.session and request.request_body is not None:
        begin_turn(
            resolve_id=resolution.id,
            user=request.user,
            session=request.session,
            messages=request.request_body["messages"],
        )


__all__ = ["CompressionInputs", "ResolveRequest", "Run", "context_request", "resolve"]
