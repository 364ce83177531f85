"""The deployments a route's calls go to (``model.upstream`` names them, in fallback order),
checked against the protocol the client speaks: translating between providers is not the gateway's job."""

from __future__ import annotations

import logging
from dataclasses import replace

from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import Upstream, called_upstream, deployment_to_call
from contextplatform.gateway.protocol import GatewayError, Protocol
from contextplatform.protocols.registry import PROTOCOLS
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import LoadedRoute, loaded_route

logger = logging.getLogger("contextplatform.gateway")

ENDPOINTS: dict[str, str] = {name: protocol.path for name, protocol in PROTOCOLS.items()}
RESPONSES = "openai_responses"
ENDPOINTS[RESPONSES] = "/v1/responses"


def route_deployments(spec: RouteSpec) -> list[Deployment]:
    """The route's deployments in fallback order; 400 when the route names none, 503 when it
    names a missing one (the operator's to fix, not the caller's)."""
    names = spec.model.upstreams
    if not names:
        raise GatewayError(
            400,
            "no_upstream",
            f"route {spec.name!r} has no upstream deployment: set its model.upstream to the "
            "name of a deployment (or a list of names in fallback order)",
            param="model",
        )
    found: list[Deployment] = []
    for name in names:
        deployment = deployment_to_call(name)
        if deployment is None:
            raise GatewayError(
                503,
                "deployment_missing",
                f"route {spec.name!r} names the deployment {name!r}, which does not exist",
            )
        found.append(deployment)
    return found


def route_deployment(spec: RouteSpec) -> Deployment:
    """The route's first deployment (errors as ``route_deployments``)."""
    return route_deployments(spec)[0]


def _speaks(deployment_protocol: str, protocol: Protocol, responses: bool) -> bool:
    """Whether a deployment serves the endpoint: its own protocol's, and for a Responses call
    (whose pipeline speaks Chat Completions) also a deployment that speaks Responses."""
    return deployment_protocol == protocol or (
        responses and protocol == "openai" and deployment_protocol == RESPONSES
    )


def _called(upstream: Upstream) -> Upstream:
    """A Responses deployment as the pipeline sees it: Chat Completions, translated on the wire."""
    if upstream.protocol == RESPONSES:
        return replace(upstream, protocol="openai", wire=RESPONSES)
    return upstream


def upstreams_for(
    route_name: str, protocol: Protocol, *, responses: bool = False
) -> tuple[LoadedRoute, list[Upstream]]:
    """The route ``route_name`` (404 when unknown) and its deployments in fallback order,
    refused with 400 when the first speaks another protocol than the endpoint called. A fallback
    that speaks another (its protocol changed after the route was saved) is left out.
    ``responses``: the call came to ``/v1/responses``, which a Responses deployment serves too
    (a chat completions call to one is refused: the gateway does not translate it that way)."""
    loaded = loaded_route(route_name, param="model")
    spec = loaded.spec
    deployments = route_deployments(spec)
    upstream = called_upstream(deployments[0])
    endpoint = ENDPOINTS[RESPONSES] if responses else ENDPOINTS[protocol]
    if not _speaks(upstream.protocol, protocol, responses):
        raise GatewayError(
            400,
            "protocol_mismatch",
            f"route {spec.name!r} forwards to the {upstream.protocol} deployment "
            f"{upstream.name!r}, but this request was sent to the {protocol} endpoint "
            f"{endpoint}: send it to {ENDPOINTS[upstream.protocol]} instead "
            "(the gateway does not translate between providers)",
            param="model",
        )
    upstreams = [_called(upstream)]
    for deployment in deployments[1:]:
        if _speaks(deployment.protocol, protocol, responses):
            upstreams.append(_called(called_upstream(deployment)))
        else:
            logger.warning(
                "route %r: the fallback deployment %r speaks %s, not %s: left out",
                spec.name,
                deployment.name,
                deployment.protocol,
                protocol,
            )
    # The resolve counts with the first deployment's tokenizer or calibration: it need not read
    # it again.
    return replace(loaded, deployment=deployments[0]), upstreams


def upstream_for(route_name: str, protocol: Protocol) -> tuple[LoadedRoute, Upstream]:
    """The route and its first deployment (errors as ``upstreams_for``)."""
    loaded, upstreams = upstreams_for(route_name, protocol)
    return loaded, upstreams[0]
