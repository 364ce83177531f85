"""The evaluation run as a Celery task; tenant-schemas-celery runs it in the schema it was sent from."""

from __future__ import annotations

from celery import shared_task

from contextplatform.evals.models import EvalRun
from contextplatform.evals.runner import execute


@shared_task(name="evals.run_evaluation", acks_late=True)
def run_evaluation(run_id: str) -> str:
    run = EvalRun.objects.select_related("route").filter(pk=run_id).first()
    if run is None or run.status not in (EvalRun.QUEUED, EvalRun.RUNNING):
        return "gone"
    return execute(run).status
