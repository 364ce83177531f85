"""The deployments a route's calls go to (``model.upstream`` names them, in fallback order),
checked against the protocol the client speaks: translating between providers is not the
gateway's job, between OpenAI's Chat Completions and Responses it is (each attempt's body is
built for its deployment by ``forward``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import RESPONSES_PROTOCOL as RESPONSES
from contextplatform.deployments.schema import provider_of
from contextplatform.deployments.selectors import Upstream, called_upstream, deployment_to_call
from contextplatform.gateway.protocol import GatewayError, Protocol
from contextplatform.protocols import openai_responses
from contextplatform.protocols.registry import PROTOCOLS
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import LoadedRoute, loaded_route

logger = logging.getLogger("contextplatform.gateway")

ENDPOINTS: dict[str, str] = {name: protocol.path for name, protocol in PROTOCOLS.items()}
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


def _serves(deployment_protocol: str, protocol: Protocol, refused_field: str | None) -> bool:
    """Whether a deployment serves a call to the ``protocol`` endpoint: one of its own
    provider's, and for a deployment that speaks Responses, a call that asks nothing Responses
    cannot do (``refused_field`` names what it asks, None for nothing)."""
    if provider_of(deployment_protocol) != protocol:
        return False
    return deployment_protocol != RESPONSES or refused_field is None


def _called(upstream: Upstream) -> Upstream:
    """A Responses deployment as the pipeline sees it: Chat Completions, translated on the wire."""
    if upstream.protocol == RESPONSES:
        return replace(upstream, protocol="openai", wire=RESPONSES)
    return upstream


def upstreams_for(
    route_name: str,
    protocol: Protocol,
    *,
    responses: bool = False,
    body: Mapping[str, Any] | None = None,
) -> tuple[LoadedRoute, list[Upstream]]:
    """The route ``route_name`` (404 when unknown) and its deployments in fallback order,
    refused with 400 when the first speaks another provider's protocol than the endpoint called.
    A fallback that speaks another (its protocol changed after the route was saved) is left out.
    OpenAI's two protocols serve each other's calls, translated: ``responses``, the call came to
    ``/v1/responses``; otherwise a Chat Completions ``body`` goes to a deployment that speaks
    Responses unless it asks what Responses cannot do (``openai_responses.untranslatable``):
    then such deployments are left out of this call, and a route left with none is a 400 naming
    the field."""
    loaded = loaded_route(route_name, param="model")
    spec = loaded.spec
    deployments = route_deployments(spec)
    first = called_upstream(deployments[0])
    endpoint = ENDPOINTS[RESPONSES] if responses else ENDPOINTS[protocol]
    if provider_of(first.protocol) != protocol:
        raise GatewayError(
            400,
            "protocol_mismatch",
            f"route {spec.name!r} forwards to the {first.protocol} deployment "
            f"{first.name!r}, but this request was sent to the {protocol} endpoint "
            f"{endpoint}: send it to {ENDPOINTS[first.protocol]} instead "
            "(the gateway does not translate between providers)",
            param="model",
        )
    # Read only for a chat call whose route has a Responses deployment (most have none).
    refused_field = (
        openai_responses.untranslatable(body)
        if body is not None
        and protocol == "openai"
        and not responses
        and any(d.protocol == RESPONSES for d in deployments)
        else None
    )
    serving: list[Deployment] = []
    for deployment in deployments:
        if _serves(deployment.protocol, protocol, refused_field):
            serving.append(deployment)
        elif provider_of(deployment.protocol) != protocol:
            logger.warning(
                "route %r: the fallback deployment %r speaks %s, not %s: left out",
                spec.name,
                deployment.name,
                deployment.protocol,
                protocol,
            )
    if not serving:
        raise GatewayError(
            400,
            "protocol_mismatch",
            f"{refused_field}: route {spec.name!r} forwards to deployments that speak OpenAI "
            f"Responses (such as {first.name!r}), which has no {refused_field}: leave it out, "
            f"or send the call to {ENDPOINTS[RESPONSES]}",
            param=refused_field,
        )
    upstreams = [
        first if deployment is deployments[0] else called_upstream(deployment)
        for deployment in serving
    ]
    # The resolve counts with the first serving deployment's tokenizer or calibration: it need
    # not read it again.
    return replace(loaded, deployment=serving[0]), [_called(u) for u in upstreams]


def upstream_for(route_name: str, protocol: Protocol) -> tuple[LoadedRoute, Upstream]:
    """The route and its first deployment (errors as ``upstreams_for``)."""
    loaded, upstreams = upstreams_for(route_name, protocol)
    return loaded, upstreams[0]
