"""The resolve pipeline: route → parallel fetch → budget → pack → inject → replay record."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from compression.config import CompressConfig
from contextplatform.core import metrics
from contextplatform.core.errors import ApiError
from contextplatform.core.estimation import TokenEstimator, count_json
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import deployment_to_call
from contextplatform.protocols.registry import PROTOCOLS
from contextplatform.replay.ids import new_resolve_id
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import REPLAY_WRITER, PendingReplay
from contextplatform.resolve import live_events
from contextplatform.resolve.budget import Budget, plan_budget
from contextplatform.resolve.chat import ChatFormat, ChatRequest, parse_chat_request
from contextplatform.resolve.compression_stage import run_compression
from contextplatform.resolve.estimators import EstimatorChoice, estimated, estimator_for
from contextplatform.resolve.injection import SourceBlock, inject, injected_call_ids
from contextplatform.resolve.lazy_sources import lazy_sources, offer_search_tools
from contextplatform.resolve.packing import PackDecision, pack
from contextplatform.resolve.prewarmed import with_prewarmed
from contextplatform.resolve.refusals import context_length_exceeded, source_failed
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import LoadedRoute, loaded_route
from sources.base import ContextRequest, ContextSource, source_kind
from sources.fetch import SourceOutcome, fetch_all_from_thread


def signal_query(query: str, compress: CompressConfig | None, estimator: TokenEstimator) -> str:
    """``compress.signals`` shortens the text the sources and the judge read, never the request."""
    signals = compress.signals if compress else None
    if signals is None or not signals.enabled:
        return query
    from compression.signals import compress_signal_text

    return compress_signal_text(query, signals, estimator)


def lazy_outcome(tool: str, source: ContextSource) -> SourceOutcome:
    """A lazy source's line in the report: not fetched now, offered to the model as ``tool``."""
    return SourceOutcome(
        name=source.name,
        type=source.type,
        priority=source.priority,
        on_failure=source.on_failure,
        status="skipped",
        notes={"lazy": True, "tool": tool},
    )


def route_deployment(spec: RouteSpec, known: Deployment | None) -> Deployment | None:
    """The route's upstream deployment (``known`` when the caller read it already): its protocol
    decides the shape of a body valid in both."""
    name = spec.model.upstream
    if not isinstance(name, str) or not name:
        return None
    if known is not None and known.name == name:
        return known
    return deployment_to_call(name)


def build_sources(spec: RouteSpec) -> list[ContextSource]:
    default_timeout = settings.CONTEXT_DEFAULT_SOURCE_TIMEOUT_MS
    sources: list[ContextSource] = []
    for source_settings in spec.context.sources:
        kind = source_kind(source_settings.type)
        if kind is None:  # a kind removed after the route was saved
            raise ApiError(
                "invalid_request", f"route uses unknown source type {source_settings.type!r}"
            )
        sources.append(kind(source_settings, default_timeout_ms=default_timeout))
    return sources


@dataclass
class Resolution:
    id: str
    route: str
    chat: ChatRequest
    rewritten: dict[str, Any]
    budget: Budget
    outcomes: list[SourceOutcome]
    decisions: list[PackDecision]
    tokens_before: int
    tokens_after: int
    estimator: str
    duration_ms: float
    compression: dict[str, Any] = field(default_factory=dict)
    spec: RouteSpec | None = None
    # The route's sources as built for this resolve (fetched only when its context is enabled).
    sources: list[ContextSource] = field(default_factory=list)
    # The estimator the counts came from and their label (estimated, exact, provider_calibrated).
    counting: EstimatorChoice = field(default_factory=estimated)
    # The search tools offered for lazy sources (by tool name), and what their calls are asked
    # with (the gateway serves them after the resolve).
    lazy_tools: dict[str, ContextSource] = field(default_factory=dict)
    context_request: ContextRequest | None = None
    # The record a caller writes when its call is over (defer_replay), and the source kinds whose
    # after-resolve hook queued something for the answer (set by the resolve use case).
    pending_replay: PendingReplay | None = None
    answer_kinds: list[type[ContextSource]] = field(default_factory=list)
    # The sources served from the session's pre-warm (POST /sessions/{session}/prewarm).
    prewarmed: frozenset[str] = frozenset()

    @property
    def blocked(self) -> list[SourceOutcome]:
        return [o for o in self.outcomes if o.failed and o.on_failure == "block"]

    def refusal(self) -> ApiError | None:
        """The 503 this resolve answers when a source with ``on_failure: block`` failed."""
        blocked = self.blocked
        return source_failed(blocked[0], self.id) if blocked else None

    @property
    def status(self) -> str:
        if self.blocked:
            return "refused"
        return "partial" if any(o.failed for o in self.outcomes) else "ok"

    def source_reports(self) -> list[dict[str, Any]]:
        kept_by_source = Counter(d.item.source for d in self.decisions if d.kept)
        return [
            {
                "name": o.name,
                "type": o.type,
                "status": o.status,
                "items": len(o.items),
                "kept": kept_by_source.get(o.name, 0),
                "ms": round(o.ms, 2),
                "on_failure": o.on_failure,
                "error": o.error,
                **({"prewarmed": True} if o.name in self.prewarmed else {}),
                **({"notes": o.notes} if o.notes else {}),
                **({"candidates": o.candidates} if o.candidates else {}),
            }
            for o in self.outcomes
        ]

    def item_reports(self) -> list[dict[str, Any]]:
        return [
            {
                "source": d.item.source,
                "priority": d.item.priority,
                "tokens": d.item.tokens,
                "estimator": d.item.estimator,
                "score": d.item.score,
                "title": d.item.title,
                "kept": d.kept,
                "reason": d.reason,
            }
            for d in self.decisions
        ]

    def report(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "route": self.route,
            "format": self.chat.format,
            "format_reason": self.chat.format_reason,
            "request": self.rewritten,
            "budget": self.budget.as_dict(),
            "sources": self.source_reports(),
            "items": self.item_reports(),
            "compression": self.compression,
            "tokens": self.token_counts(),
        }

    def token_counts(self) -> dict[str, Any]:
        return {
            "before": self.tokens_before,
            "after": self.tokens_after,
            "estimator": self.estimator,
            **self.counting.labels(),
        }


def resolve(
    *,
    tenant_schema: str,
    capture_content: bool,
    route_name: str,
    user: str | None,
    session: str | None,
    request_body: Any,
    chat_format: ChatFormat | None,
    record: bool = True,
    allowlist: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    loaded: LoadedRoute | None = None,
    serves_tools: bool = False,
    defer_replay: bool = False,
    chat: ChatRequest | None = None,
) -> Resolution:
    """``chat``: the request as the caller already parsed it (the gateway), not parsed again.
    ``serves_tools``: the caller (the gateway) answers the model's calls of the tools the
    platform adds, so lazy sources become search tools and recoverable compression applies to
    streams too. ``defer_replay``: the record is built but left in ``pending_replay`` for the
    caller to complete and submit when its call is over (the gateway)."""
    started = time.perf_counter()
    loaded = loaded or loaded_route(route_name)
    route, spec = loaded.route, loaded.spec
    deployment = route_deployment(spec, loaded.deployment)
    protocol = deployment.protocol if deployment is not None else None
    if chat is None:
        chat = parse_chat_request(
            request_body,
            chat_format,
            protocol=protocol if protocol in PROTOCOLS else None,
        )
    counting = estimator_for(spec, deployment)
    estimator = counting.estimator
    resolution_id = new_resolve_id()
    tokens_before = count_json(chat.body, estimator)

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
    context_request = ContextRequest(
        request_id=resolution_id,
        tenant=tenant_schema,
        route=route.name,
        user=user,
        session=session,
        query=signal_query(chat.query, compress, estimator),
        turns=chat.turns,
        allowlist=tuple(allowlist),
        dry_run=not record,
        judge_deployment=spec.model.upstream,
    )
    clock = metrics.StageClock()
    offered = lazy_sources(sources, chat.body) if serves_tools and spec.context.enabled else {}
    lazy = set(map(id, offered.values()))
    fetched = [s for s in sources if id(s) not in lazy] if spec.context.enabled else []
    fetched, prewarmed = with_prewarmed(fetched, context_request)
    outcomes = fetch_all_from_thread(fetched, context_request, estimator)
    outcomes += [lazy_outcome(tool, source) for tool, source in offered.items()]
    clock.lap("fetch")

    usable = [o for o in outcomes if o.status == "ok"]
    items = [item for outcome in usable for item in outcome.items]
    decisions, used = pack(items, budget.context)
    budget.used = used
    clock.lap("pack")
    if record:  # previews stay off the live stream
        live_events.publish_source_events(tenant_schema, route.name, outcomes, decisions)
        clock.restart()

    kept_items = {id(d.item) for d in decisions if d.kept}
    blocks = [
        SourceBlock(
            name=o.name,
            type=o.type,
            contents=tuple(
                item.content
                for item in sorted(o.items, key=lambda i: -i.priority)
                if id(item) in kept_items
            ),
        )
        for o in usable
    ]
    injection_mode = spec.context.injection.mode
    rewritten = inject(chat.body, chat.format, blocks, injection_mode, resolution_id)
    injected = (
        injected_call_ids(chat.format, resolution_id, blocks)
        if injection_mode == "tool_role"
        else {}
    )
    rewritten = offer_search_tools(rewritten, chat.format, offered)
    clock.lap("inject")
    stage = run_compression(
        config=compress,
        body=rewritten,
        chat_format=chat.format,
        budget=budget,
        tokens=(injected_tokens := count_json(rewritten, estimator)),
        estimator=estimator,
        injected=injected,
        request_id=resolution_id,
        route=route.name,
        user=user,
        headers=headers or {},
        stream=bool(chat.body.get("stream")) and not serves_tools,
        persist=record,
        numeric_budget=isinstance(budget_config.max_tokens, int),
        judge_default=spec.model.upstream,
        allowlist=tuple(allowlist),
    )
    # Count the body once more only if compression actually replaced it.
    tokens_after = injected_tokens if stage.body is rewritten else count_json(stage.body, estimator)
    rewritten = stage.body
    clock.lap("compress")
    resolution = Resolution(
        id=resolution_id,
        route=route.name,
        spec=spec,
        chat=chat,
        rewritten=rewritten,
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
        context_request=context_request,
        prewarmed=prewarmed,
    )
    resolution.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    if record:
        if defer_replay:
            replay = build_replay(
                resolution, user=user, session=session, capture_content=capture_content
            )
            resolution.pending_replay = PendingReplay(tenant_schema, replay)
        else:  # through save_replay: the observability bench switches the replay stage off there
            save_replay(
                resolution,
                tenant_schema=tenant_schema,
                user=user,
                session=session,
                capture_content=capture_content,
            )
        clock.lap("replay")
    return resolution


def save_replay(
    resolution: Resolution,
    *,
    tenant_schema: str,
    user: str | None,
    session: str | None,
    capture_content: bool,
) -> ReplayRecord:
    """Build the resolve's replay record and hand it to the writer (written off the resolve path;
    see ``replay_writer``)."""
    record = build_replay(resolution, user=user, session=session, capture_content=capture_content)
    REPLAY_WRITER.submit(tenant_schema, record)
    return record


def build_replay(
    resolution: Resolution,
    *,
    user: str | None,
    session: str | None,
    capture_content: bool,
) -> ReplayRecord:
    """The resolve's replay record, not yet written."""
    refusal = resolution.refusal()
    error = {"code": refusal.code, "message": refusal.message} if refusal else None
    record = ReplayRecord(
        id=resolution.id,
        route=resolution.route,
        user_id=user or "",
        session_key=session or "",
        status=resolution.status,
        format=resolution.chat.format,
        created_at=timezone.now(),
        duration_ms=resolution.duration_ms,
        sources=resolution.source_reports(),
        items=resolution.item_reports(),
        budget=resolution.budget.as_dict(),
        tokens=resolution.token_counts(),
        compression=resolution.compression,
        error=error,
        request_body=resolution.chat.body if capture_content else None,
        rewritten_body=resolution.rewritten if capture_content and refusal is None else None,
    )
    return record
