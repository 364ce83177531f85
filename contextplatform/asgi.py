"""ASGI entry point (uvicorn): HTTP through Django; WebSockets (``/ws/metrics/``) through Channels,
behind the tenant authentication middleware (API key, or the admin session on the tenant's host).
Static files (the admin's, the live dashboard's) are served from the apps under ``STATIC_URL``."""

import os
from typing import Any

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

django_application = get_asgi_application()

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


application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_application),
        "websocket": TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        "lifespan": lifespan,
    }
)
