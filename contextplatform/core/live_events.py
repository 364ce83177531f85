"""The live event bus: group messages to a tenant's dashboards (``/ws/metrics/``), sent without
ever raising into or waiting inside a resolve. With Redis a background thread sends, and only
while some process has a listener of that tenant (``Listeners``); the in-memory layer (one
process) is sent to directly, and only when this process has a listener of that tenant."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
import weakref
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from channels_redis.core import RedisChannelLayer

from contextplatform.core.batches import take_batch
from contextplatform.core.metrics import LIVE_EVENTS

logger = logging.getLogger("contextplatform.live")

EVENT_TYPE = "metrics.events"


def metrics_group(schema: str) -> str:
    return f"metrics.{schema}"


# --- publishing ----------------------------------------------------------------------------------


class BackgroundSender:
    """One daemon thread per process with its own event loop sends queued group messages, so a
    resolve only enqueues. A full queue drops (counted) rather than slowing resolves down."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._queue: queue.Queue[tuple[BaseChannelLayer, str, dict[str, Any]]] = queue.Queue(
            capacity
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def submit(self, layer: BaseChannelLayer, group: str, message: dict[str, Any]) -> None:
        self._ensure_thread()
        try:
            self._queue.put_nowait((layer, group, message))
        except queue.Full:
            LIVE_EVENTS.labels("dropped").inc()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Every submitted message sent (or failed); for tests and benchmarks."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._pid != os.getpid():  # a forked child inherits no thread
                self._queue = queue.Queue(self._queue.maxsize)
            if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="live-metrics-sender", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        while True:
            # What queues up within SEND_LINGER_S goes out together: one group send per group,
            # its events joined (a dashboard reads a message's events one by one), so the busier
            # the process, the fewer sends per resolve (a send to Redis is two commands and a
            # turn of this thread's event loop).
            taken = take_batch(self._queue, MAX_BATCH, SEND_LINGER_S)
            try:
                for layer, group, message, count in joined(taken):
                    self._send(loop, layer, group, message, count)
            finally:
                for _ in taken:
                    self._queue.task_done()

    @staticmethod
    def _send(
        loop: asyncio.AbstractEventLoop,
        layer: BaseChannelLayer,
        group: str,
        message: dict[str, Any],
        count: int,
    ) -> None:
        try:
            if not loop.run_until_complete(LISTENERS.ask(layer, group)):
                return  # nobody listens: dropped uncounted, as the in-memory layer's
            loop.run_until_complete(layer.group_send(group, message))
            LIVE_EVENTS.labels("sent").inc(count)
        except Exception:
            LIVE_EVENTS.labels("failed").inc(count)
            logger.warning("live_publish_failed", extra={"group": group}, exc_info=True)


MAX_BATCH = 256
SEND_LINGER_S = 0.05  # a dashboard shows an event at most this much later
Queued = tuple[BaseChannelLayer, str, dict[str, Any]]


def joined(taken: list[Queued]) -> list[tuple[BaseChannelLayer, str, dict[str, Any], int]]:
    """The messages to send, with how many queued messages each carries: the event messages of
    one (layer, group) joined into the first of them, any other message as it is."""
    out: list[tuple[BaseChannelLayer, str, dict[str, Any], int]] = []
    first: dict[tuple[int, str], int] = {}  # (layer, group) -> its event message's place in out
    for layer, group, message in taken:
        events = message.get("events")
        if message.get("type") != EVENT_TYPE or not isinstance(events, list):
            out.append((layer, group, message, 1))
            continue
        key = (id(layer), group)
        if key not in first:
            first[key] = len(out)
            out.append((layer, group, {**message, "events": list(events)}, 1))
            continue
        place = first[key]
        _, _, merged, count = out[place]
        merged["events"].extend(events)
        out[place] = (layer, group, merged, count + 1)
    return out


SENDER = BackgroundSender()

LISTENERS_KNOWN_S = 0.5


class Listeners:
    """Whether a group has a listener anywhere (a dashboard in any process), as the Redis layer's
    own group membership says: asked by the sender thread before it sends, at most once per group
    every ``LISTENERS_KNOWN_S``. A resolve does not queue events for a group known to have none,
    as a resolve on the in-memory layer does not send them, so a deployment with no dashboard
    open pays nothing for them; a dashboard that opens is heard of within ``LISTENERS_KNOWN_S``."""

    def __init__(self) -> None:
        # per layer (weakly: a layer replaced by new settings takes what was known with it)
        self._known: weakref.WeakKeyDictionary[BaseChannelLayer, dict[str, tuple[bool, float]]]
        self._known = weakref.WeakKeyDictionary()

    def may_have(self, layer: BaseChannelLayer, group: str) -> bool:
        known = self._known.get(layer, {}).get(group)
        return known is None or known[0] or time.monotonic() - known[1] > LISTENERS_KNOWN_S

    async def ask(self, layer: BaseChannelLayer, group: str) -> bool:
        heard = await has_listeners(layer, group)
        self._known.setdefault(layer, {})[group] = (heard, time.monotonic())
        return heard


async def has_listeners(layer: BaseChannelLayer, group: str) -> bool:
    """True when the group has a member that joined within the layer's ``group_expiry`` (the
    members ``group_send`` would send to); any other layer is assumed to have one."""
    if not isinstance(layer, RedisChannelLayer):
        return True
    # channels-redis 4.3's own key of a group (pinned in pyproject.toml): a sorted set of its
    # members, each scored with the time it joined.
    connection = layer.connection(layer.consistent_hash(group))
    joined_since = int(time.time()) - layer.group_expiry
    return bool(await connection.zcount(layer._group_key(group), joined_since, "+inf"))


LISTENERS = Listeners()


class ListenerLoop:
    """The event loop this process's dashboards listen on (the in-memory layer's queues belong to
    it): a resolve schedules its message there and returns, as with Redis it only enqueues."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def remember(self) -> None:
        """Called on the listeners' loop when one joins a group."""
        self._loop = asyncio.get_running_loop()

    def send(self, layer: InMemoryChannelLayer, group: str, message: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            async_to_sync(layer.group_send)(group, message)  # no known loop: wait for the send
            LIVE_EVENTS.labels("sent").inc()
            return
        future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
        future.add_done_callback(count_sent)


def count_sent(future: Any) -> None:
    if future.cancelled() or future.exception() is not None:
        LIVE_EVENTS.labels("failed").inc()
    else:
        LIVE_EVENTS.labels("sent").inc()


LISTENER_LOOP = ListenerLoop()


def publish(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        # One process: listeners live in this process's event loop; with none, nothing to do.
        if group in layer.groups:
            LISTENER_LOOP.send(layer, group, message)
        return
    if LISTENERS.may_have(layer, group):
        SENDER.submit(layer, group, message)
