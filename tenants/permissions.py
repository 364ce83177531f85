"""Scope checks: each API view names the scope every method needs."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import MethodNotAllowed, NotAuthenticated, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from tenants.authentication import ApiPrincipal


def required_scope(view: Any, method: str) -> str | None:
    scopes = getattr(view, "required_scopes", None)
    if isinstance(scopes, str):
        return scopes
    if isinstance(scopes, dict):
        if method == "HEAD":
            method = "GET"  # HEAD reads what GET reads
        return scopes.get(method) or scopes.get("*")
    return None


class HasScope(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if getattr(view, "public", False):
            return True
        principal = request.user
        if not isinstance(principal, ApiPrincipal):
            raise NotAuthenticated("an API key is required (Authorization: Bearer <key>)")
        if request.method == "OPTIONS":
            return True  # describes the endpoint, reads no tenant data
        scope = required_scope(view, request.method or "GET")
        if scope is None:
            method = (request.method or "GET").lower()
            if method not in view.http_method_names or not hasattr(view, method):
                raise MethodNotAllowed(request.method or "GET")  # 405, not a misleading 403
            raise PermissionDenied(f"method {request.method} is not allowed with an API key here")
        if not principal.has_scope(scope):
            raise PermissionDenied(f"this API key lacks the scope {scope!r}")
        return True
