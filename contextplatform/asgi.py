"""ASGI entry point (uvicorn): HTTP through Django; WebSockets are added by the metrics stream."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")

django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

application = ProtocolTypeRouter({"http": django_application})
