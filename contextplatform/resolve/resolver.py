"""A resolve's result (``Resolution``) and what the pipeline (``pipeline.py``) builds it with: the
route's sources, its deployment, the replay record."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from compression.config import CompressConfig
from contextplatform.core.errors import ApiError
from contextplatform.core.estimation import TokenEstimator
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import deployment_to_call
from contextplatform.replay.item_keys import item_id
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.usage_records import set_cost
from contextplatform.replay.writer import REPLAY_WRITER, PendingReplay
from contextplatform.resolve.budget import Budget
from contextplatform.resolve.chat import ChatRequest
from contextplatform.resolve.estimators import EstimatorChoice, estimated
from contextplatform.resolve.packing import PackDecision
from contextplatform.resolve.refusals import source_failed
from contextplatform.routes.configuration.schema import RouteSpec
from sources.base import ContextRequest, ContextSource, source_kind
from sources.fetch import SourceOutcome


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
    name = spec.model.primary_upstream
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
    # The arm of the route's traffic split this resolve ran (``arms.py``).
    variant: str = "main"

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
                "id": item_id(d.item),
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
            "variant": self.variant,
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


def save_replay(
    resolution: Resolution,
    *,
    tenant_schema: str,
    user: str | None,
    session: str | None,
    capture_content: bool,
    defer: bool = False,
    key_id: int | None = None,
) -> ReplayRecord:
    """Build the resolve's replay record and hand it to the writer (written off the resolve path;
    see ``replay.writer``), or, with ``defer``, leave it pending on the resolution for the caller
    to complete and submit when its call is over (the gateway)."""
    record = build_replay(
        resolution, user=user, session=session, capture_content=capture_content, key_id=key_id
    )
    if defer:
        resolution.pending_replay = PendingReplay(tenant_schema, record)
    else:
        REPLAY_WRITER.submit(tenant_schema, record)
    return record


def build_replay(
    resolution: Resolution,
    *,
    user: str | None,
    session: str | None,
    capture_content: bool,
    key_id: int | None = None,
) -> ReplayRecord:
    """The resolve's replay record, not yet written: its cost so far is its judge's calls (the
    model's answer adds its own when it comes, ``usage_records.apply_usage``)."""
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
        variant=resolution.variant,
        key_id=key_id,
    )
    set_cost(record, model=None)
    return record
