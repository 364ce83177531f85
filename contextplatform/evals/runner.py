"""One evaluation run: each of the route's cases resolved through the pipeline in its ``evaluate``
mode (no model answer asked, nothing written: no replay record, session, memory or its strength,
no cache), scored (``scoring.py``) and stored on the run. A route with variants has every case run
on each arm (main, then each variant in the order written): main's results and metrics are the
run's, and each arm's metrics are kept beside them."""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection
from django.utils import timezone

from contextplatform.core.errors import ApiError
from contextplatform.evals import scoring
from contextplatform.evals.models import EvalCase, EvalRun
from contextplatform.resolve import modes
from contextplatform.resolve.arms import MAIN
from contextplatform.resolve.pipeline import resolve
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import tenant_request
from contextplatform.routes.selectors import loaded_route
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def case_body(case: EvalCase) -> dict[str, Any]:
    """The request a case stands for: its query as the user's one message."""
    return {"model": "evaluation", "messages": [{"role": "user", "content": case.query}]}


def kept_items(resolution: Resolution) -> list[dict[str, Any]]:
    """What the resolve kept, in kept order: each item's source and its document or memory (by id
    only: a memory's text is read when the run is shown, so an erased memory leaves nothing here)."""
    kept: list[dict[str, Any]] = []
    for decision in resolution.decisions:
        if not decision.kept:
            continue
        item = decision.item
        entry: dict[str, Any] = {"source": item.source, "tokens": item.tokens}
        metadata = item.metadata or {}
        if metadata.get("memory_id") is not None:
            entry["memory"] = str(metadata["memory_id"])
        elif metadata.get("document_id") is not None:
            entry["document"] = str(metadata["document_id"])
            if item.title:
                entry["title"] = item.title
        kept.append(entry)
    return kept


def kept_for_scoring(resolution: Resolution) -> scoring.Kept:
    kept = [d.item for d in resolution.decisions if d.kept]
    return scoring.Kept(
        documents=[
            str(i.metadata["document_id"])
            for i in kept
            if i.metadata.get("document_id") is not None
        ],
        memory_texts=[i.content for i in kept if i.metadata.get("memory_id") is not None],
        texts=[i.content for i in kept],
    )


def expected(case: EvalCase) -> scoring.Expected:
    expect = case.expect or {}
    return scoring.Expected(
        documents=tuple(expect.get("documents", ())),
        memories_containing=tuple(expect.get("memories_containing", ())),
        text_containing=tuple(expect.get("text_containing", ())),
    )


def current_tenant() -> Tenant:
    tenant = getattr(connection, "tenant", None)
    if isinstance(tenant, Tenant):
        return tenant
    return Tenant.objects.get(schema_name=connection.schema_name)


def run_case(
    tenant: Tenant, route: str, case: EvalCase, arm: str = MAIN
) -> tuple[dict[str, Any], Any]:
    """A case's result on ``arm`` and its score (None when the resolve was refused)."""
    result: dict[str, Any] = {"id": case.slug, "query": case.query}
    if case.user:
        result["user"] = case.user
    try:
        run = resolve(
            tenant_request(
                tenant,
                route=route,
                request_body=case_body(case),
                user=case.user or None,
                session=case.session or None,
                # The evaluate mode splits no traffic: it runs the arm it is given.
                variant=None if arm == MAIN else arm,
            ),
            modes.EVALUATE,
        )
    except ApiError as error:
        return {**result, "hit": False, "error": error.message}, None
    resolution = run.resolution
    assert resolution is not None
    score = scoring.score(expected(case), kept_for_scoring(resolution))
    result.update(
        hit=score.hit,
        missing=score.missing,
        kept=kept_items(resolution),
        tokens=resolution.tokens_after,
        latency_ms=resolution.duration_ms,
    )
    failed = [o.name for o in resolution.outcomes if o.failed]
    if failed:
        result["failed_sources"] = failed
    if score.precision is not None:
        result.update(kept_precision=round(score.precision, 4), ndcg=round(score.ndcg or 0, 4))
    return result, (score, resolution.tokens_after, resolution.duration_ms)


def run_arm(
    tenant: Tenant, route: str, cases: list[EvalCase], arm: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every case resolved on ``arm``: their results, and the arm's metrics."""
    results: list[dict[str, Any]] = []
    scores: list[scoring.Score] = []
    tokens: list[int] = []
    latencies: list[float] = []
    for case in cases:
        result, measured = run_case(tenant, route, case, arm)
        results.append(result)
        if measured is None:
            scores.append(scoring.Score(hit=False))
            continue
        score, used, took = measured
        scores.append(score)
        tokens.append(used)
        latencies.append(took)
    return results, scoring.metrics(scores, tokens, latencies)


def execute(run: EvalRun) -> EvalRun:
    """Resolve and score every case of the run's route on each of its arms; the run ends done, or
    failed with why."""
    run.status = EvalRun.RUNNING
    run.save(update_fields=["status"])
    try:
        tenant = current_tenant()
        loaded = loaded_route(run.route.name)
        route = loaded.route.name
        cases = list(EvalCase.objects.filter(route=run.route).order_by("position"))
        run.results, run.metrics = run_arm(tenant, route, cases, MAIN)
        variants = [variant.name for variant in loaded.spec.variants]
        run.arms = (
            {MAIN: run.metrics, **{arm: run_arm(tenant, route, cases, arm)[1] for arm in variants}}
            if variants
            else {}
        )
        run.status = EvalRun.DONE
    except Exception as error:  # a run that cannot finish says why instead of staying "running"
        logger.exception("evaluation run %s failed", run.id)
        run.status = EvalRun.FAILED
        run.error = str(error)[:2000] or type(error).__name__
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "results", "metrics", "arms", "error", "finished_at"])
    return run
