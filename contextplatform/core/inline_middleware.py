"""Django's and django-prometheus's middleware, run on the event loop instead of a thread.

Under ASGI, Django runs each hook of a synchronous-only middleware (``MiddlewareMixin``) through
``sync_to_async``: a trip to the request's thread and back, twice per middleware, ten middleware
deep, on every request, health checks included. The hooks of the middleware wrapped here do no
I/O (they read and write headers, cookies and lazy objects, count metrics), so on an async stack
they are called directly; on a synchronous stack (the test client) the wrapped middleware runs
exactly as itself.

Where a hook may do I/O after all (a session that was changed is saved to the database, messages
that were used may be stored in it), ``response_needs_thread`` says so and that hook alone takes
the thread.

The browser's middleware (sessions, CSRF, the user, messages) is passed by on the gateway's paths
(``KEY_ONLY_PATH_PREFIX``): their callers are applications with an API key, which send no cookie
and are never a browser's session, and the views there read none of what these set up (their
views are CSRF-exempt). Setting it up for every call cost more than the gateway's own admission.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthentication
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessages
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessions
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware as DjangoXFrameOptions
from django.middleware.common import CommonMiddleware as DjangoCommon
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrf
from django.middleware.security import SecurityMiddleware as DjangoSecurity
from django_prometheus.middleware import (
    PrometheusAfterMiddleware as DjangoPrometheusAfter,
)
from django_prometheus.middleware import (
    PrometheusBeforeMiddleware as DjangoPrometheusBefore,
)

Response = HttpResponseBase
INLINE_HOOKS = ("process_view", "process_template_response")
# The OpenAI- and Anthropic-compatible gateway's paths: API keys only, no browser state.
KEY_ONLY_PATH_PREFIX = "/v1/"


class InlineHooks:
    """Mixed in before a ``MiddlewareMixin`` middleware (so it still is one, as the admin's checks
    ask): on an async stack its hooks are called in place; on a sync one nothing changes."""

    get_response: Callable[[HttpRequest], Any]
    # Browser state only: passed by on the paths that take an API key alone.
    browser_only = False

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        super().__init__(get_response)  # type: ignore[call-arg]
        if iscoroutinefunction(self):  # MiddlewareMixin marks itself on an async stack
            # Django looks these up on the instance when it builds the chain: a coroutine is
            # awaited in place, a plain method would be sent to a thread.
            for name in INLINE_HOOKS:
                hook = getattr(self, name, None)
                if hook is not None:
                    # Bound, as Django's error messages name the hook's middleware by __self__.
                    setattr(self, name, MethodType(_in_place(hook), self))

    async def __acall__(self, request: HttpRequest) -> Response:
        if self.browser_only and request.path.startswith(KEY_ONLY_PATH_PREFIX):
            return await self.get_response(request)
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        if response is None:
            response = await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request):
                response = await sync_to_async(self.process_response)(request, response)
            else:
                response = self.process_response(request, response)
        return response

    def response_needs_thread(self, request: HttpRequest) -> bool:
        return False


def _in_place(hook: Callable[..., Any]) -> Callable[..., Any]:
    async def run(_middleware: Any, *args: Any) -> Any:
        return hook(*args)

    return run


class PrometheusBeforeMiddleware(InlineHooks, DjangoPrometheusBefore):
    pass


class PrometheusAfterMiddleware(InlineHooks, DjangoPrometheusAfter):
    def label_metric(
        self, metric: Any, request: HttpRequest, response: Any = None, **labels: str
    ) -> Any:
        """The series's child, looked up once per process: ``labels()`` checks and locks at
        every call, and a request asks for seven of them. The label values are closed sets
        (methods, view names, status codes, charsets), so the children kept here are as many as
        prometheus_client itself keeps."""
        if not labels:
            return metric
        key = (id(metric), *labels.items())
        child = _METRIC_CHILDREN.get(key)
        if child is None:
            child = _METRIC_CHILDREN[key] = metric.labels(**labels)
        return child


_METRIC_CHILDREN: dict[tuple[Any, ...], Any] = {}


class SecurityMiddleware(InlineHooks, DjangoSecurity):
    pass


class SessionMiddleware(InlineHooks, DjangoSessions):
    """Loading the session is lazy (the view's thread does it); saving it is not."""

    browser_only = True

    def response_needs_thread(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (
            session.modified or bool(settings.SESSION_SAVE_EVERY_REQUEST)
        )


class CommonMiddleware(InlineHooks, DjangoCommon):
    pass


class CsrfViewMiddleware(InlineHooks, DjangoCsrf):
    browser_only = True


class AuthenticationMiddleware(InlineHooks, DjangoAuthentication):
    browser_only = True


class MessageMiddleware(InlineHooks, DjangoMessages):
    """Messages that were used or added are stored at the response, possibly in the session."""

    browser_only = True

    def response_needs_thread(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(InlineHooks, DjangoXFrameOptions):
    pass
