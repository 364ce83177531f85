"""HTTP endpoints of a tenant's own keys (scope ``keys.manage``): list, create, read, merge-patch,
revoke (``DELETE``), rotate. Thin: parse, call a service or selector, present. Every key is read
through ``selectors.tenant_keys``: another tenant's key id is a 404 like an unknown one. The plain
key is in the answer of a create and a rotate only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import invalid_request, not_found
from contextplatform.core.merge_patch import merge_patch
from contextplatform.core.read_back import without_read_only
from contextplatform.core.validation import parse
from contextplatform.core.views import ApiView
from tenants import key_services, selectors
from tenants.key_schema import KeySpec
from tenants.models import ApiKey
from tenants.services import IssuedKey

READ_ONLY = frozenset(
    {"id", "key", "prefix", "spent", "status", "created_at", "last_used_at", "revoked_at"}
)


def written_fields(api_key: ApiKey) -> dict[str, Any]:
    """What POST takes: the base of a merge patch."""
    max_usd = api_key.budget_max_usd
    return {
        "name": api_key.name,
        "scopes": list(api_key.scopes),
        "expires_at": api_key.expires_at.isoformat() if api_key.expires_at else None,
        "rate_limit": {"rpm": api_key.rate_limit_rpm, "tpm": api_key.rate_limit_tpm},
        "budget": {
            "max_usd": float(max_usd) if max_usd is not None else None,
            "max_tokens": api_key.budget_max_tokens,
            "period": api_key.budget_period,
        },
        "metadata": api_key.metadata,
    }


def key_representation(api_key: ApiKey, spent: tuple[int, Decimal] | None) -> dict[str, Any]:
    tokens, usd = spent or (0, Decimal(0))

    def when(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": api_key.public_id,
        **written_fields(api_key),
        "prefix": api_key.prefix,
        "status": api_key.status,
        "spent": {"usd": float(usd), "tokens": tokens},
        "created_at": when(api_key.created_at),
        "last_used_at": when(api_key.last_used_at),
        "revoked_at": when(api_key.revoked_at),
    }


def represented(api_key: ApiKey) -> dict[str, Any]:
    return key_representation(api_key, selectors.current_spend([api_key]).get(api_key.pk))


def issued_representation(issued: IssuedKey) -> dict[str, Any]:
    return {**represented(issued.api_key), "key": issued.plain_key}


def granter_scopes(request: Request) -> frozenset[str]:
    scopes: frozenset[str] = request.user.scopes
    return scopes


class KeyListView(ApiView):
    required_scopes = {"GET": "keys.manage", "POST": "keys.manage"}

    @extend_schema(responses={200: dict}, summary="List the tenant's API keys")
    def get(self, request: Request) -> Response:
        keys = list(selectors.tenant_keys(self.tenant(request)))
        spend = selectors.current_spend(keys)
        return Response({"data": [key_representation(k, spend.get(k.pk)) for k in keys]})

    @extend_schema(
        request=KeySpec,
        responses={201: dict, 403: dict},
        summary="Create an API key (the plain key is in this answer only)",
    )
    def post(self, request: Request) -> Response:
        spec = self.body(request, KeySpec, READ_ONLY)
        issued = key_services.create_key(
            tenant=self.tenant(request), spec=spec, granter_scopes=granter_scopes(request)
        )
        return Response(issued_representation(issued), status=status.HTTP_201_CREATED)


def existing_key(request: Request, key_id: str) -> ApiKey:
    api_key = selectors.tenant_key(ApiView.tenant(request), key_id)
    if api_key is None:
        raise not_found(f"API key {key_id!r} does not exist")
    return api_key


class KeyDetailView(ApiView):
    required_scopes = {"GET": "keys.manage", "PATCH": "keys.manage", "DELETE": "keys.manage"}

    @extend_schema(responses={200: dict}, summary="Read an API key (never the key itself)")
    def get(self, request: Request, key_id: str) -> Response:
        return Response(represented(existing_key(request, key_id)))

    @extend_schema(
        request=dict,
        responses={200: dict, 403: dict},
        summary="Change an API key's name, scopes, expiry, limits, budget or metadata (JSON "
        "merge patch)",
    )
    def patch(self, request: Request, key_id: str) -> Response:
        api_key = existing_key(request, key_id)
        if not isinstance(request.data, dict):
            raise invalid_request("expected a JSON object (a merge patch of the key)")
        patched = merge_patch(written_fields(api_key), without_read_only(request.data, READ_ONLY))
        spec = parse(KeySpec, patched)
        updated = key_services.update_key(
            api_key=api_key, spec=spec, granter_scopes=granter_scopes(request)
        )
        return Response(represented(updated))

    @extend_schema(
        responses={200: dict},
        summary="Revoke an API key (refused from now on; the key stays listed as revoked)",
    )
    def delete(self, request: Request, key_id: str) -> Response:
        return Response(represented(key_services.revoke_key(api_key=existing_key(request, key_id))))


class KeyRotateView(ApiView):
    required_scopes = {"POST": "keys.manage"}

    @extend_schema(
        request=None,
        responses={201: dict, 409: dict},
        summary="Rotate an API key: a new key with the same settings; the old one is revoked "
        "at once",
    )
    def post(self, request: Request, key_id: str) -> Response:
        issued = key_services.rotate_key(
            api_key=existing_key(request, key_id), granter_scopes=granter_scopes(request)
        )
        return Response(issued_representation(issued), status=status.HTTP_201_CREATED)
