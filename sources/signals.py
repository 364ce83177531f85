"""Collections kept per process (``sources.rag.backends.COLLECTIONS``) are dropped in every process
when one is saved or deleted; the writes that go through ``update()`` (a new version after an
ingestion, a new calibration) call ``collections_changed`` themselves."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save

from contextplatform.core.config_cache import changed
from sources.models import Collection

COLLECTIONS_CACHE = "collections"


def collections_changed(sender: type | None = None, using: str = "default", **kwargs: Any) -> None:
    changed(COLLECTIONS_CACHE, using)


def connect() -> None:
    for signal in (post_save, post_delete):
        signal.connect(collections_changed, sender=Collection, dispatch_uid="collections-kept")
