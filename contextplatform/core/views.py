"""Shared pieces of the API views."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from rest_framework.request import Request
from rest_framework.views import APIView

from contextplatform.core.errors import invalid_request
from contextplatform.core.validation import parse

ModelT = TypeVar("ModelT", bound=BaseModel)


class ApiView(APIView):
    """An API view: key-authenticated, scope-checked, JSON in and out, errors in the envelope."""

    required_scopes: dict[str, str] | str = {}

    def body(self, request: Request, model: type[ModelT]) -> ModelT:
        return parse(model, request.data)

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
