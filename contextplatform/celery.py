"""The Celery app: tenant-aware tasks (each runs in the schema it was sent from)."""

import os
import sys

from tenant_schemas_celery.app import CeleryApp

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

app = CeleryApp("contextplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
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
