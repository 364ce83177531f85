"""ASGI entry point (uvicorn): HTTP through Django; WebSockets (``/ws/metrics/``) through Channels,
behind the tenant authentication middleware (API key, or the admin session on the tenant's host).
Static files (the admin's, the live dashboard's) are served from the apps under ``STATIC_URL``."""

import asyncio
import contextlib
import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

import django
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpResponseBase
from django.urls import set_script_prefix

from contextplatform.core import tracing
from contextplatform.core.request_thread import on_request_thread, serving_on

IDLE_REQUEST_THREADS = 64  # kept for the next requests; beyond that a finished one is shut down


class RequestThreads:
    """Each request's synchronous code runs on one thread of its own (its database connection is
    that thread's), as Django does; the threads are reused instead of started and joined per
    request, which cost more than a health check itself."""

    def __init__(self, idle_limit: int = IDLE_REQUEST_THREADS):
        self.idle_limit = idle_limit
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < self.idle_limit:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)


class ReusedThreadsASGIHandler(ASGIHandler):
    threads = RequestThreads()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            # The caller owns an executor it hands to the context: it is not shut down on exit.
            async with ThreadSensitiveContext(executor=executor):
                with serving_on(executor):
                    await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's own ``ASGIHandler.handle`` (5.2) but for two steps, whose synchronous work is
        queued on the request's thread instead of awaited there: ``request_started`` (Django's
        receivers check that thread's database connections) and the response's ``close`` (its
        resources, then ``request_finished``, which gives the thread's connection back to the
        pool). The thread runs its work in order, so the first is done before the view runs there
        and the second after it; awaiting each cost a round trip to the thread and back, together
        more CPU than the middleware around a resolve."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        await on_request_thread(
            partial(signals.request_started.send, sender=self.__class__, scope=scope)
        )
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request() -> HttpResponseBase:
            response = await self.run_get_response(request)
            # A client that disconnects during the send cancels it: nothing more to send.
            with contextlib.suppress(asyncio.CancelledError):
                await self.send_response(response, send)
            return response

        # The disconnect listener first: it raises nothing unexpected that would keep the
        # request's task from being cancelled.
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:  # the client disconnected
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:  # views may handle their cancellation
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            await on_request_thread(response.close)
        body_file.close()


django.setup(set_prefix=False)
django_application = ReusedThreadsASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from contextplatform.live import TenantAuthMiddlewareStack, websocket_urlpatterns  # noqa: E402
from contextplatform.replay.writer import REPLAY_WRITER  # noqa: E402


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol: at startup, the replay spools of processes that ended without
    writing them are replayed (in a thread of their own; Django connects on the first request);
    at shutdown, once the requests in flight are answered, the replay records this
    process accepted are written before the shutdown completes, and the spans still queued for
    export are sent.

    A worker stopped by SIGTERM does not get to run ``atexit`` hooks: once the application has
    shut down, uvicorn raises the signal it caught again, under the default handler that
    gunicorn's uvicorn worker installs, and the process dies there. The writer's own ``atexit``
    flush covers the other ways out (``manage.py``, a worker without the lifespan)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            REPLAY_WRITER.start_recovery()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(REPLAY_WRITER.close)
            await asyncio.to_thread(tracing.shutdown)  # the spans still queued, exported
            await send({"type": "lifespan.shutdown.complete"})
            return


LIVENESS_PATH = "/healthz"
LIVENESS_BODY = b'{"status": "ok"}'
LIVENESS_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(LIVENESS_BODY)).encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


class Liveness:
    """``GET /healthz`` answered here, in front of Django: liveness is that this process and its
    event loop answer, which is all a probe may wait on (a probe that queued behind Django's
    request handling would fail a busy process that is alive). Readiness, which asks the
    database, is Django's ``/readyz``."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] != LIVENESS_PATH or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": LIVENESS_HEADERS})
        body = b"" if scope["method"] == "HEAD" else LIVENESS_BODY
        await send({"type": "http.response.body", "body": body})


application = ProtocolTypeRouter(
    {
        "http": Liveness(ASGIStaticFilesHandler(django_application)),
        "websocket": TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        "lifespan": lifespan,
    }
)

# What start-up loaded (Django, the apps, their modules and settings) lives as long as the process:
# frozen out of the garbage collector's reach, a collection scans only what requests made since.
# Requests leave reference cycles behind (Django's disconnect listener ends in an exception with
# its traceback, asgiref's per-request locals, uvicorn's cycle objects), which only a collection
# frees; with the default threshold they outlived the young collections of the requests still in
# flight and piled up for full ones, which scanned the whole heap and paused a worker for 60-200 ms
# every few seconds under load: the resolve's p99. A young collection every 10,000 allocations
# finds most of them dead already (docs/benchmarks.md, "HTTP path").
gc.freeze()
gc.set_threshold(10_000, 10, 10)
