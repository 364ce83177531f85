"""The Celery app: tenant-aware tasks (each runs in the schema it was sent from)."""

import os
import sys

from kombu.entity import Exchange, Queue
from tenant_schemas_celery.app import CeleryApp

from contextplatform.queues import all_queues, default_queue, task_routes

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

app = CeleryApp("contextplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# One queue per kind of work (contextplatform/queues.py), all declared: a worker without -Q
# consumes every one. Eager runs (the tests, the embedded default) run a task in its caller.
app.conf.task_default_queue = default_queue()
app.conf.task_routes = task_routes()
# Each bound by its own name, as Celery binds a queue a route names: a queue declared by name
# alone is bound to the default exchange and routing key, and a task sent to any would go to all.
app.conf.task_queues = [
    Queue(name, Exchange(name), routing_key=name)  # type: ignore[no-untyped-call]
    for name in all_queues()
]
app.autodiscover_tasks()


def solo_worker_command(*options: str) -> list[str]:
    """The command line of one quiet worker of this app in a single process (the tests' and the
    benchmarks' worker); ``options`` are added to it."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "contextplatform",
        "worker",
        "--pool",
        "solo",
        "--concurrency",
        "1",
        "--loglevel",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        *options,
    ]
