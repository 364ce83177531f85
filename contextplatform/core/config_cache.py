"""Configuration that every request reads, kept in each process until it changes anywhere.

API keys with their tenants, and routes with the layers beneath them, are read by every resolve
and gateway call and written a few times a day. Each process keeps what it read in a
``ProcessCache``. A write, in any process (the API, the admin, a management command, a Celery
task), calls ``changed()``: this process drops what it kept at once, and a ``NOTIFY`` on the
database channel ``contextplatform_config`` is queued in the writing transaction, which PostgreSQL
delivers when that transaction commits (never when it rolls back). Every process listens on that
channel from a thread of its own and drops what it kept when a notification arrives.

What this never serves stale:
- nothing is kept while the listener is not connected (starting, or the database restarting), and
  everything is dropped when it connects again, so a notification missed meanwhile costs nothing;
- a read that was under way while a change arrived is not kept (the generation check);
- nothing read inside a transaction is kept: it may see that transaction's own uncommitted writes.
The window that remains is the notification's trip from the committing process to the others (a
few milliseconds on one machine); ``MAX_AGE_S`` bounds an entry's life whatever happens.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

logger = logging.getLogger("contextplatform.config_cache")

CHANNEL = "contextplatform_config"
MAX_AGE_S = 300.0
RECONNECT_DELAY_S = 1.0
PING_INTERVAL_S = 10.0  # a database that went away is noticed within this
WAKE_INTERVAL_S = 1.0  # how soon the listener notices that it was asked to stop

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_caches: dict[str, ProcessCache[object, object]] = {}

# The name that drops every cache: most keep entries by tenant schema, and a tenant created,
# changed or deleted (its schema dropped with its rows, which sends no signal) must not find what
# was kept for a schema of the same name. A listener drops every cache for any name it does not
# know, this one included.
EVERY_CACHE = "*"


class ProcessCache(Generic[K, V]):
    """Values loaded by ``load`` kept per key, least recently used dropped past ``max_entries``."""

    def __init__(self, name: str, max_entries: int = 4096, max_age_s: float = MAX_AGE_S):
        self.name = name
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0
        _caches[name] = self  # type: ignore[assignment]

    def get(self, key: K, load: Callable[[], V], keep_if: Callable[[V], bool] | None = None) -> V:
        """The kept value, else what ``load`` returns (kept unless ``keep_if`` refuses it)."""
        if not self._usable():
            return load()
        found, kept, generation = self._lookup(key)
        if found:
            return cast(V, kept)
        value = load()
        if keep_if is None or keep_if(value):
            self._keep(key, value, generation)
        return value

    def peek(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when ``key`` is kept; never loads. For a caller on the event loop that
        would otherwise go to a thread to load it.

        No transaction can be open on the event loop (Django's ORM refuses to run there), so the
        transaction check is left out: asking ``connections`` for the connection from a task on
        the loop builds a new, never used database wrapper every time, which cost more than the
        rest of the lookup."""
        if not _listener.listening():
            return False, None
        found, value, _ = self._lookup(key)
        return found, value

    def _usable(self) -> bool:
        """Only for callers on a thread, where the ORM runs: never inside a transaction."""
        return _listener.listening() and not connections[DEFAULT_DB_ALIAS].in_atomic_block

    def _lookup(self, key: K) -> tuple[bool, V | None, int]:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry[0] < self.max_age_s:
                self._entries.move_to_end(key)
                return True, entry[1], self._generation
            return False, None, self._generation

    def _keep(self, key: K, value: V, generation: int) -> None:
        now = time.monotonic()
        with self._lock:
            if generation == self._generation and _listener.listening():
                self._entries[key] = (now, value)
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def replace(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` in this process now, in place of what was kept: no reader
        finds the entry missing meanwhile (and loads it again itself). A read under way may hold
        the old value: not kept either. Read inside a transaction, it is not kept (dropped)."""
        if not self._usable():
            self.forget(key)
            return
        now = time.monotonic()
        with self._lock:
            self._generation += 1
            if _listener.listening():
                self._entries[key] = (now, value)
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)

    def forget(self, key: K) -> None:
        """Drop one entry in this process only (its change is one other processes may see late)."""
        with self._lock:
            self._generation += 1  # a read under way may hold the old value: not kept either
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def changed(name: str, using: str = DEFAULT_DB_ALIAS) -> None:
    """A write changed what cache ``name`` keeps: dropped here now, and in every process once the
    writing transaction commits."""
    if name == EVERY_CACHE:
        clear_all()
    elif (cache := _caches.get(name)) is not None:
        cache.clear()
    try:
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, name])
    except Exception:  # the write itself decides; the age bound covers a notification not sent
        logger.warning("config_cache_notify_failed", extra={"cache": name}, exc_info=True)


def drop_on_change(name: str, *models: type) -> None:
    """Cache ``name`` is dropped (here and in every process) whenever one of ``models`` is saved
    or deleted. Writes through ``update()`` send no signal: they call ``changed`` themselves."""
    from django.db.models.signals import post_delete, post_save

    def dropped(sender: type, using: str = DEFAULT_DB_ALIAS, **kwargs: object) -> None:
        changed(name, using)

    for signal in (post_save, post_delete):
        for model in models:
            signal.connect(
                dropped, sender=model, weak=False, dispatch_uid=f"{name}-{model.__name__}"
            )


def clear_all() -> None:
    for cache in list(_caches.values()):
        cache.clear()


class _Listener:
    """One thread per process LISTENing on ``CHANNEL`` on a connection of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._connected = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Set at every notification handled and every (re)connection: what tests wait on.
        self.cleared = threading.Condition()
        self.clears = 0

    def listening(self) -> bool:
        if self._pid != os.getpid():
            self._start()
        return self._connected.is_set()

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()  # a forked child starts its own thread: threads do not fork
            self._connected = threading.Event()
            self._stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._run, name="config-cache-listener", daemon=True
            )
            self._thread.start()
            # Hooks run last registered first: this one before the embedded database's stops
            # the server, so the connection it drops is an expected end, not a warning.
            atexit.register(self._stopping.set)

    def stop(self) -> None:
        """Close the listener's connection (a database about to be dropped); nothing is kept until
        a cache is used again, which starts a new listener."""
        with self._lock:
            thread, self._pid = self._thread, None
            self._stopping.set()
        if thread is not None:
            thread.join(timeout=10 * WAKE_INTERVAL_S)

    def _run(self) -> None:
        connected, stopping = self._connected, self._stopping
        while not stopping.is_set():
            try:
                with psycopg.connect(**_connection_params(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    clear_all()  # whatever changed while not listening
                    connected.set()
                    self._count_clear()
                    self._listen(conn, stopping)
            except Exception:
                if not stopping.is_set():
                    logger.warning("config_cache_listener_disconnected", exc_info=True)
            connected.clear()
            clear_all()
            stopping.wait(RECONNECT_DELAY_S)

    def _listen(
        self, conn: psycopg.Connection[tuple[object, ...]], stopping: threading.Event
    ) -> None:
        last_ping = time.monotonic()
        while not stopping.is_set():
            for notify in conn.notifies(timeout=WAKE_INTERVAL_S):
                cache = _caches.get(notify.payload)
                if cache is not None:
                    cache.clear()
                else:
                    clear_all()
                self._count_clear()
            if time.monotonic() - last_ping >= PING_INTERVAL_S:
                conn.execute("SELECT 1")  # raises when the database went away
                last_ping = time.monotonic()

    def _count_clear(self) -> None:
        with self.cleared:
            self.clears += 1
            self.cleared.notify_all()


def _connection_params() -> dict[str, object]:
    """The database's own connection, or PostgreSQL itself (``DATABASE_DIRECT_URL``) where the
    database is reached through a transaction pool: LISTEN belongs to a session, and a pool that
    lends a server connection per transaction would give the LISTEN's session to other clients
    and deliver nothing here."""
    direct = getattr(settings, "DATABASE_DIRECT_URL", "")
    if direct:
        params: dict[str, object] = {"conninfo": direct}
    else:
        params = dict(connections[DEFAULT_DB_ALIAS].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    params.setdefault("connect_timeout", 5)
    params["application_name"] = "contextplatform-config-listener"
    return params


_listener = _Listener()


def stop_listening() -> None:
    _listener.stop()


def wait_until_listening(timeout_s: float = 30.0) -> bool:
    """Start this process's listener if it is not running and wait for its connection."""
    _listener.listening()
    return _listener._connected.wait(timeout_s)
