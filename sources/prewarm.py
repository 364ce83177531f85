"""The pre-warm cache: what a session's sources read ahead, and its invalidation.

``POST /api/v1/sessions/{session}/prewarm`` (``contextplatform/resolve/prewarm.py``) fetches the
route's prewarmable sources and keeps what they read under one entry per tenant, user and
session (Django's cache: Redis, or this process's memory), for ``CONTEXT_PREWARM_TTL_SECONDS``.
The next resolve of that session and user reads it back instead of fetching.

Invalidation is by generation: a write to a user's profile or memories sets a new token for the
tenant and user, a write to a session's messages one for the tenant and session, a bulk write
(retention) one for the whole tenant. An entry records the tokens it was read under (read before
its sources are fetched, so a write during the fetch invalidates it too) and counts only while
all three are unchanged. A token outlives every entry read before it was set, so an entry never
comes back to life when a token expires. ``memory.services`` calls ``invalidate_prewarm`` on
every write of memories; every save and delete of a profile, a session or a message does (below).

An entry holds its tenant, user and session and is served only to the same three: one user's
pre-warmed values never reach another user, nor another tenant (the key is a digest of the
three, checked again against the entry's own).

Most resolves find nothing pre-warmed, and asking Redis for it was most of what ``REDIS_URL`` cost
a resolve (a round trip from the request's thread). So each process remembers the tenant, user
and session it found nothing for (``config_cache``), and forgets them all whenever a pre-warm is
stored, in any process (a notification on the database): a resolve after a pre-warm asks again.
In the notification's trip (milliseconds) another process may still fetch as usual, which a
lookup that found nothing does anyway: the remembered answer is never a wrong one, only a
missed saving.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save

from contextplatform.core.config_cache import ProcessCache, changed
from sources.base import ContextSource

logger = logging.getLogger("contextplatform.sources")

Generations = tuple[str | None, str | None, str | None]


def ttl_seconds() -> float:
    return float(settings.CONTEXT_PREWARM_TTL_SECONDS)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def entry_key(schema: str, user: str, session: str) -> str:
    return f"prewarm:entry:{_digest(schema, user, session)}"


def generation_keys(schema: str, user: str, session: str) -> tuple[str, str, str]:
    return (
        f"prewarm:gen:tenant:{_digest(schema)}",
        f"prewarm:gen:user:{_digest(schema, user)}",
        f"prewarm:gen:session:{_digest(schema, session)}",
    )


def fingerprint(source: ContextSource) -> str:
    """A source's identity in an entry: its kind and its whole settings, so a route changed after
    the pre-warm (another ``fields`` list, ``last_n_turns``…) fetches again."""
    return _digest(source.type, source.settings.model_dump_json())


@dataclass(frozen=True)
class Warmed:
    """One session's pre-warmed sources (by ``fingerprint``) and the tokens they were read under."""

    schema: str
    user: str
    session: str
    generations: Generations
    expires_at: float  # Unix time: the TTL is checked here too, whatever the cache rounds it to
    states: dict[str, Any] = field(default_factory=dict)


def generations(schema: str, user: str, session: str) -> Generations:
    """The current tokens, read before a pre-warm's fetch starts."""
    values = cache.get_many(generation_keys(schema, user, session))
    tenant, user_key, session_key = generation_keys(schema, user, session)
    return values.get(tenant), values.get(user_key), values.get(session_key)


# (tenant, user, session) that this process found nothing pre-warmed for, dropped in every process
# when a pre-warm is stored anywhere.
NOTHING_WARMED = "prewarm-nothing"
_nothing_warmed: ProcessCache[tuple[str, str, str], dict[str, Any]] = ProcessCache(NOTHING_WARMED)


def store(
    *, schema: str, user: str, session: str, read_under: Generations, states: dict[str, Any]
) -> None:
    ttl = ttl_seconds()
    entry = Warmed(
        schema=schema,
        user=user,
        session=session,
        generations=read_under,
        expires_at=time.time() + ttl,
        states=states,
    )
    cache.set(entry_key(schema, user, session), entry, timeout=math.ceil(ttl) + 1)
    changed(NOTHING_WARMED)  # every process asks again


def lookup(schema: str, user: str, session: str) -> dict[str, Any]:
    """The pre-warmed states of this tenant, user and session still valid now (``{}`` when there
    are none, and when the cache does not answer: a resolve then fetches as usual)."""
    return _nothing_warmed.get(
        (schema, user, session), lambda: _read(schema, user, session), keep_if=_is_empty
    )


def _is_empty(states: dict[str, Any]) -> bool:
    return not states


def _read(schema: str, user: str, session: str) -> dict[str, Any]:
    key = entry_key(schema, user, session)
    keys = generation_keys(schema, user, session)
    try:
        values = cache.get_many([key, *keys])
    except Exception as error:  # the cache is an optimisation here, never a failure
        logger.warning("prewarm_lookup_failed", extra={"err": str(error)[:300]})
        return {}
    entry = values.get(key)
    if not isinstance(entry, Warmed):
        return {}
    if (entry.schema, entry.user, entry.session) != (schema, user, session):
        return {}
    current = (values.get(keys[0]), values.get(keys[1]), values.get(keys[2]))
    if entry.generations != current or entry.expires_at <= time.time():
        return {}
    return entry.states


def invalidate_prewarm(schema: str, *, user: str | None = None, session: str | None = None) -> None:
    """A write changed what a pre-warm read: the user's (profile, memories), the session's
    (messages), or, with neither, anything of the tenant's (retention). Inside a transaction the
    tokens change when it commits: until then every reader, the stores' own included, still sees
    the old rows, and a pre-warm reading them before the commit is invalidated by it."""
    keys: list[str] = []
    if user:
        keys.append(generation_keys(schema, user, "")[1])
    if session:
        keys.append(generation_keys(schema, "", session)[2])
    if not keys:
        keys.append(generation_keys(schema, "", "")[0])
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _bump(keys))
    else:
        _bump(keys)


def _bump(keys: list[str]) -> None:
    try:
        # Longer than any entry lives, so an entry read before this token never sees it expire.
        timeout = 2 * math.ceil(ttl_seconds()) + 2
        cache.set_many({key: secrets.token_hex(8) for key in keys}, timeout=timeout)
    except Exception as error:  # the resolve's lookup fails on the same cache: nothing is served
        logger.warning("prewarm_invalidation_failed", extra={"err": str(error)[:300]})


# --- the models' own writes -----------------------------------------------------------------------
# Profiles and sessions are written through sources.services and, by operators, through the
# admin's pages, which save the models directly: every save and delete of them invalidates.
# ``append_session_messages`` creates its messages in bulk (no signal) and saves the session,
# which does. Memories are written in SQL (memory.services calls ``invalidate_prewarm`` itself).


def _profile_written(sender: Any, instance: Any, **kwargs: Any) -> None:
    invalidate_prewarm(connection.schema_name, user=instance.user_id)


def _session_written(sender: Any, instance: Any, **kwargs: Any) -> None:
    invalidate_prewarm(connection.schema_name, session=instance.key)


def _message_written(sender: Any, instance: Any, **kwargs: Any) -> None:
    from sources.models import ChatSession

    key = ChatSession.objects.filter(pk=instance.session_id).values_list("key", flat=True).first()
    if key is not None:  # a message deleted with its session: the session's delete invalidates
        invalidate_prewarm(connection.schema_name, session=key)


def connect_model_signals() -> None:
    """Called once from ``SourcesConfig.ready``."""
    from sources.models import ChatMessage, ChatSession, UserProfile

    receivers = (
        (UserProfile, _profile_written),
        (ChatSession, _session_written),
        (ChatMessage, _message_written),
    )
    for model, receiver in receivers:
        for signal in (post_save, post_delete):
            signal.connect(receiver, sender=model, dispatch_uid=f"prewarm-{model.__name__}")
