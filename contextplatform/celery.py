"""The Celery app: tenant-aware tasks (each runs in the schema it was sent from)."""

import os

from tenant_schemas_celery.app import CeleryApp

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

app = CeleryApp("contextplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
