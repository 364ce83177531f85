"""Collections kept per process (``sources.rag.backends.COLLECTIONS``) are dropped in every process
when one is saved or deleted; the writes that go through ``update()`` (a new version after an
ingestion, a new calibration) call ``collections_changed`` themselves. Users' profile attributes
kept per process (``sources.selectors.PROFILES``) are dropped when any profile is saved or
deleted (every write of a profile goes through the model)."""

from __future__ import annotations

from contextplatform.core.config_cache import changed, drop_on_change
from sources.models import Collection, UserProfile

COLLECTIONS_CACHE = "collections"
PROFILES_CACHE = "user_profiles"


def collections_changed() -> None:
    changed(COLLECTIONS_CACHE)


def connect() -> None:
    drop_on_change(COLLECTIONS_CACHE, Collection)
    drop_on_change(PROFILES_CACHE, UserProfile)
