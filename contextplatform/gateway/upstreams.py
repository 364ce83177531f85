"""The deployment a route's calls go to (``model.upstream`` names it), checked against the
protocol the client speaks: translating between providers is not the gateway's job."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import Upstream, deployment_to_call, upstream_of
from contextplatform.gateway.protocol import GatewayError, Protocol
from contextplatform.protocols.registry import PROTOCOLS
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import LoadedRoute, loaded_route

ENDPOINTS: dict[str, str] = {name: protocol.path for name, protocol in PROTOCOLS.items()}


def route_deployment(spec: RouteSpec) -> Deployment:
    """The route's deployment; 400 when the route names none, 503 when it names a missing one
    (the operator's to fix, not the caller's)."""
    name: Any = spec.model.upstream
    if not isinstance(name, str) or not name:
        raise GatewayError(
            400,
            "no_upstream",
            f"route {spec.name!r} has no upstream deployment: set its model.upstream to the "
            "name of a deployment",
            param="model",
        )
    deployment = deployment_to_call(name)
    if deployment is None:
        raise GatewayError(
            503,
            "deployment_missing",
            f"route {spec.name!r} names the deployment {name!r}, which does not exist",
        )
    return deployment


def upstream_for(route_name: str, protocol: Protocol) -> tuple[LoadedRoute, Upstream]:
    """The route ``route_name`` (404 when unknown) and its deployment, refused with 400 when it
    speaks another protocol than the endpoint called."""
    loaded = loaded_route(route_name, param="model")
    spec = loaded.spec
    deployment = route_deployment(spec)
    upstream = upstream_of(deployment)
    if upstream.protocol != protocol:
        raise GatewayError(
            400,
            "protocol_mismatch",
            f"route {spec.name!r} forwards to the {upstream.protocol} deployment "
            f"{upstream.name!r}, but this request was sent to the {protocol} endpoint "
            f"{ENDPOINTS[protocol]}: send it to {ENDPOINTS[upstream.protocol]} instead "
            "(the gateway does not translate between providers)",
            param="model",
        )
    # The resolve counts with the deployment's tokenizer or calibration: it need not read it again.
    return replace(loaded, deployment=deployment), upstream
