"""Celery tasks of the knowledge base. tenant-schemas-celery runs each in the schema it was sent from."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from sources.embedding import get_embedder
from sources.ingestion import run_ingestion_job
from sources.models import IngestionJob


@shared_task(name="sources.ingest_documents", acks_late=True)
def ingest_documents(job_id: str) -> str:
    return run_ingestion_job(job_id, get_embedder()).status


def enqueue_ingestion(job: IngestionJob) -> None:
    """Run now when Celery is eager (embedded default); otherwise send once the job is committed."""
    if ingest_documents.app.conf.task_always_eager:
        ingest_documents.apply(args=[job.id])
    else:
        transaction.on_commit(lambda: ingest_documents.delay(job.id))
