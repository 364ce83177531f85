"""Shared pieces of the API views."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import transaction
from django.http import HttpResponse, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from pydantic import BaseModel
from rest_framework.request import Request
from rest_framework.views import APIView

from contextplatform.core.errors import invalid_request
from contextplatform.core.read_back import without_read_only
from contextplatform.core.text_limits import refuse_bad_params
from contextplatform.core.validation import parse

ModelT = TypeVar("ModelT", bound=BaseModel)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ApiView(APIView):
    """An API view: key-authenticated, scope-checked, JSON in and out, errors in the envelope."""

    required_scopes: dict[str, str] | str = {}
    # A write and its answer are one transaction: the answer is rendered before the commit, so a
    # write whose answer fails (or whose view ends in a server error) leaves nothing behind, and a
    # retrying client makes no duplicate. Views that fetch sources or call models (resolve, its
    # previews, pre-warm, hand-back, ingestion's inline job) set it off: they would hold a
    # transaction across the network, and they write through services that are atomic themselves.
    atomic_writes = True

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not (self.atomic_writes and request.method in WRITE_METHODS):
            return super().dispatch(request, *args, **kwargs)
        with transaction.atomic():
            response = super().dispatch(request, *args, **kwargs)
            if response.status_code >= 500:
                transaction.set_rollback(True)
            return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """After the key and its scope, before the handler: path and query parameters with a NUL
        character (or an unpaired surrogate), and path parameters longer than any id column,
        refused here, so that no view can forget it (bodies: ``core/parsers.py``)."""
        super().initial(request, *args, **kwargs)
        query = request.query_params
        refuse_bad_params(kwargs, ((name, v) for name, values in query.lists() for v in values))

    def finalize_response(
        self, request: Request, response: HttpResponseBase, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        """Rendered here, on the request's thread, and handed on as a plain response: Django's
        async handler would otherwise send a DRF response back to a thread only to render it."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if not isinstance(response, SimpleTemplateResponse):
            return response
        response.render()
        rendered = HttpResponse(response.content, status=response.status_code)
        for header, value in response.items():
            rendered[header] = value
        rendered.cookies = response.cookies
        return rendered

    def body(
        self, request: Request, model: type[ModelT], read_only: frozenset[str] = frozenset()
    ) -> ModelT:
        """The request's body as ``model``; the members ``read_only`` names (what the resource's
        representation adds) are left out first, so a GET body posts back."""
        return parse(model, without_read_only(request.data, read_only))

    @staticmethod
    def tenant(request: Request) -> Any:
        return request._request.tenant

    @staticmethod
    def query_int(request: Request, name: str, *, default: int, high: int) -> int:
        """A whole-number query parameter between 1 and ``high``."""
        try:
            value = int(request.query_params.get(name, default))
        except ValueError:
            raise invalid_request(f"{name}: expected a whole number", name) from None
        if not 1 <= value <= high:
            raise invalid_request(f"{name}: must be between 1 and {high}", name)
        return value


def replacement_body(data: Any, read_only: frozenset[str], name: str) -> Any:
    """A ``PUT`` body of the resource at ``name``, as its parser takes it: the read-only members
    its representation adds left out (core/read_back.py), and the path's name unless the body
    gives one (a rename); anything but an object as it is, for the parser to report."""
    data = without_read_only(data, read_only)
    if isinstance(data, dict):
        return {"name": name, **data}
    return data
