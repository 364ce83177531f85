"""Celery's queues, one per kind of work, and the workers that consume them.

Kinds of work that must not wait behind each other get queues of their own: a memory write (a
handed-back turn that the next resolve of its user should find) must not wait behind a
10,000-document ingestion job or an evaluation run calling a model for minutes. Every task not
named here (the periodic maintenance beat sends) runs on the default queue.

Each kind's queue is named under the default queue's (``CELERY_TASK_DEFAULT_QUEUE``, ``celery``):
``celery.memory``, ``celery.ingestion``... A deployment or a test run that names its own default
queue on a shared Redis gets its own queues of every kind with it. A worker started without
``-Q`` consumes all of them (the app declares them all); the cluster's and deploy/'s workers each
name theirs.

"""

from __future__ import annotations

import os

DEFAULT = "default"
INGESTION = "ingestion"
MEMORY = "memory"
EVALUATION = "evaluation"

# Task name → its kind; any other task is of the default kind.
TASK_KINDS = {
    "sources.ingest_documents": INGESTION,
    "memory.write_turn": MEMORY,
    "evals.run_evaluation": EVALUATION,
}

# deploy/'s workers: one per kind, each scaled on its own.
WORKER_KINDS: tuple[str, ...] = (MEMORY, INGESTION, EVALUATION, DEFAULT)

# The cluster shape's workers on one machine (scripts/cluster.py), the kinds each consumes: two
# write memories, so that one killed in the middle of a write (the fault tests kill worker0)
# leaves the other writing; evaluation runs share a worker with the default queue's maintenance,
# both rare, which keeps the machine to four workers.
CLUSTER_WORKERS: tuple[tuple[str, ...], ...] = (
    (MEMORY,),
    (MEMORY,),
    (INGESTION,),
    (EVALUATION, DEFAULT),
)


def default_queue() -> str:
    return os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "").strip() or "celery"


def queue_name(kind: str, default: str | None = None) -> str:
    """The queue of ``kind`` under the default queue ``default`` (this process's if None)."""
    default = default or default_queue()
    return default if kind == DEFAULT else f"{default}.{kind}"


def queue_of(task_name: str, default: str | None = None) -> str:
    """The queue the task named ``task_name`` is sent to."""
    return queue_name(TASK_KINDS.get(task_name, DEFAULT), default)


def all_queues(default: str | None = None) -> list[str]:
    return [queue_name(kind, default) for kind in (DEFAULT, *sorted(set(TASK_KINDS.values())))]


def task_routes(default: str | None = None) -> dict[str, dict[str, str]]:
    """Celery's ``task_routes``: each task of a kind of its own to that kind's queue."""
    return {task: {"queue": queue_name(kind, default)} for task, kind in TASK_KINDS.items()}
