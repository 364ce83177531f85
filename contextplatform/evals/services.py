"""Writes of evaluation sets and runs: replace a route's cases, start a run (on demand, or after a
change of the route or a layer beneath it)."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Iterable

from django.db import connection, transaction
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.evals.cases import Case
from contextplatform.evals.models import EvalCase, EvalRun
from contextplatform.evals.selectors import cases_of, latest_run
from contextplatform.routes.models import Route

logger = logging.getLogger(__name__)


def new_run_id() -> str:
    return "evr_" + secrets.token_hex(12)


@transaction.atomic
def replace_cases(*, route: Route, cases: list[Case]) -> list[EvalCase]:
    """The route's evaluation set becomes ``cases``, in their order."""
    EvalCase.objects.filter(route=route).delete()
    return EvalCase.objects.bulk_create(
        EvalCase(
            route=route,
            slug=case.id,
            position=position,
            query=case.query,
            user=case.user or "",
            session=case.session or "",
            expect=case.expect.as_dict(),
        )
        for position, case in enumerate(cases)
    )


def fingerprint(route: Route) -> str:
    """The route's version, its effective configuration and its cases, hashed."""
    try:
        configuration = route.spec().model_dump(mode="json")
    except ApiError as error:
        configuration = {"invalid": error.message, "context": route.context}
    text = json.dumps([route.version, configuration, cases_of(route)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def start_run(*, route: Route, triggered_by: str = EvalRun.MANUAL) -> EvalRun:
    """A queued run of the route's cases, sent to the worker once the transaction commits (run
    there and then when Celery is eager, the embedded default)."""
    if not EvalCase.objects.filter(route=route).exists():
        raise invalid_request(
            f"route {route.name!r} has no evaluation cases; PUT /api/v1/routes/{route.name}/evals first"
        )
    run = EvalRun.objects.create(
        id=new_run_id(),
        route=route,
        route_version=route.version,
        triggered_by=triggered_by,
        fingerprint=fingerprint(route),
    )
    from contextplatform.evals.tasks import run_evaluation

    schema = connection.schema_name

    def send() -> None:
        # Sent from the schema the run belongs to: the task runs there (tenant-schemas-celery).
        with schema_context(schema):
            try:
                run_evaluation.delay(run.id)
            except Exception as error:  # the broker unreachable: the run says so, not "queued"
                logger.exception("evaluation run %s could not be queued", run.id)
                EvalRun.objects.filter(pk=run.id, status=EvalRun.QUEUED).update(
                    status=EvalRun.FAILED,
                    error=f"could not be queued: {error}"[:2000],
                    finished_at=timezone.now(),
                )

    transaction.on_commit(send)
    return run


def run_changed(route_ids: Iterable[int]) -> list[EvalRun]:
    """After a change of these routes or a layer beneath them: a run of each route with cases
    whose version, configuration or cases differ from what its latest run measured."""
    started: list[EvalRun] = []
    routes = Route.objects.select_related("recipe").filter(
        pk__in=list(route_ids), eval_cases__isnull=False
    )
    for route in routes.distinct().order_by("name"):
        latest = latest_run(route)
        if latest is not None and latest.fingerprint == fingerprint(route):
            continue
        started.append(start_run(route=route, triggered_by=EvalRun.SAVE))
    return started


def run_after_commit(schema: str, route_ids: list[int]) -> None:
    """Once the change is committed, in the schema it was made in."""

    def run() -> None:
        with schema_context(schema):
            run_changed(route_ids)

    transaction.on_commit(run)
