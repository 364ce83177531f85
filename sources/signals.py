"""Collections kept per process (``sources.rag.backends.COLLECTIONS``) are dropped in every process
when one is saved or deleted; the writes that go through ``update()`` (a new version after an
ingestion, a new calibration) call ``collections_changed`` themselves."""

from __future__ import annotations

from contextplatform.core.config_cache import changed, drop_on_change
from sources.models import Collection

COLLECTIONS_CACHE = "collections"


def collections_changed() -> None:
    changed(COLLECTIONS_CACHE)


def connect() -> None:
    drop_on_change(COLLECTIONS_CACHE, Collection)
