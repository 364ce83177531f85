"""HTTP endpoints of deployments: list, create, read, replace, merge-patch, delete. Thin: parse,
call a service or selector, present. No representation holds the key or a header value, only
``api_key_set`` and ``headers_set`` (the header names). A
delete or rename of a deployment that routes name raises ``DeploymentInUse``, an ``ApiError``: the
API's envelope, 409 ``conflict``, naming them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import invalid_request, not_found
from contextplatform.core.merge_patch import merge_patch
from contextplatform.core.read_back import without_read_only
from contextplatform.core.views import ApiView, replacement_body
from contextplatform.deployments import selectors, services
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import READ_ONLY_FIELDS, DeploymentSpec


def written_fields(deployment: Deployment) -> dict[str, Any]:
    """What PUT takes, less the key and the headers (the base of a merge patch: write-only, a
    patch naming ``headers`` replaces them all)."""
    return {
        "name": deployment.name,
        "protocol": deployment.protocol,
        "base_url": deployment.base_url,
        "model": deployment.model,
        "timeout_ms": deployment.timeout_ms,
        "context_window": deployment.context_window,
        "max_output_tokens": deployment.max_output_tokens,
        "may_judge": deployment.may_judge,
        "price": deployment.price,
        "limits": dict(deployment.limits or {}),
    }


# What a deployment's representation adds to what it writes; a write ignores them
# (core/read_back.py). ``api_key_set`` and ``headers_set`` among them: a body without ``api_key``
# (``headers``) keeps the stored key (headers).
READ_ONLY = frozenset(READ_ONLY_FIELDS)


def deployment_representation(deployment: Deployment) -> dict[str, Any]:
    price = deployment.effective_price
    return {
        **written_fields(deployment),
        "api_key_set": deployment.api_key_set,
        "headers_set": deployment.header_names,  # write-only values: the names alone are shown
        # Read-only: kept by the gateway from the provider's reported usage.
        "calibration": deployment.calibration,
        "calibration_samples": deployment.calibration_samples,
        # What calls are priced at: the deployment's own price, else its model's public one.
        "effective_price": price.as_dict() if price is not None else None,
        "price_source": (
            "deployment" if deployment.price is not None else ("default" if price else None)
        ),
        "created_at": deployment.created_at.isoformat(),
        "updated_at": deployment.updated_at.isoformat(),
    }


def existing_deployment(name: str) -> Deployment:
    deployment = selectors.deployment_named(name)
    if deployment is None:
        raise not_found(f"deployment {name!r} does not exist")
    return deployment


class DeploymentListView(ApiView):
    required_scopes = {"GET": "deployments.read", "POST": "deployments.write"}

    @extend_schema(responses={200: dict}, summary="List deployments")
    def get(self, request: Request) -> Response:
        return Response({"data": [deployment_representation(d) for d in selectors.deployments()]})

    @extend_schema(request=DeploymentSpec, responses={201: dict}, summary="Create a deployment")
    def post(self, request: Request) -> Response:
        spec = services.parse_deployment(without_read_only(request.data, READ_ONLY))
        deployment = services.create_deployment(spec=spec)
        return Response(deployment_representation(deployment), status=status.HTTP_201_CREATED)


class DeploymentDetailView(ApiView):
    required_scopes = {
        "GET": "deployments.read",
        "PUT": "deployments.write",
        "PATCH": "deployments.write",
        "DELETE": "deployments.write",
    }

    @extend_schema(responses={200: dict}, summary="Read a deployment")
    def get(self, request: Request, name: str) -> Response:
        return Response(deployment_representation(existing_deployment(name)))

    @extend_schema(
        request=DeploymentSpec,
        responses={200: dict, 409: dict},
        summary="Replace a deployment (without api_key or headers the stored ones stay; null "
        "clears them; a rename is refused with 409 while routes name it)",
    )
    def put(self, request: Request, name: str) -> Response:
        deployment = existing_deployment(name)
        spec = services.parse_deployment(replacement_body(request.data, READ_ONLY, name))
        updated = services.update_deployment(
            deployment=deployment, spec=spec, api_key=services.key_change(spec)
        )
        return Response(deployment_representation(updated))

    @extend_schema(
        request=dict,
        responses={200: dict, 409: dict},
        summary="Change part of a deployment (JSON merge patch; api_key null clears the key; "
        "headers replace the stored ones, null clears them)",
    )
    def patch(self, request: Request, name: str) -> Response:
        deployment = existing_deployment(name)
        if not isinstance(request.data, dict):
            raise invalid_request("expected a JSON object (a merge patch of the deployment)")
        # A new key travels in the patch like any member; null removes it, as merge patch says.
        patch = without_read_only(request.data, READ_ONLY)
        spec = services.parse_deployment(merge_patch(written_fields(deployment), patch))
        api_key: services.KeyChange = services.KEEP_KEY
        if "api_key" in request.data:
            api_key = spec.api_key
        updated = services.update_deployment(
            deployment=deployment,
            spec=spec,
            api_key=api_key,
            replace_headers="headers" in patch,  # null: merge patch removes them all
        )
        return Response(deployment_representation(updated))

    @extend_schema(
        responses={204: None, 409: dict},
        summary="Delete a deployment (409 conflict while a route, recipe or the defaults name it)",
    )
    def delete(self, request: Request, name: str) -> Response:
        services.delete_deployment(deployment=existing_deployment(name))
        return Response(status=status.HTTP_204_NO_CONTENT)
