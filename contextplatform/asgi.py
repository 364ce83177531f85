"""ASGI entry point (uvicorn): HTTP through Django; WebSockets (``/ws/metrics/``) through Channels,
behind the tenant authentication middleware (API key, or the admin session on the tenant's host).
Static files (the admin's, the live dashboard's) are served from the apps under ``STATIC_URL``."""

import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

import django
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.handlers.asgi import ASGIHandler

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
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)


django.setup(set_prefix=False)
django_application = ReusedThreadsASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from contextplatform.live import TenantAuthMiddlewareStack, websocket_urlpatterns  # noqa: E402


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol: nothing to open or close here (Django connects on the first
    request; the replay writer flushes at interpreter exit), but answering it spares uvicorn's
    "ASGI 'lifespan' protocol appears unsupported" at every start."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
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
