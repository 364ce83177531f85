"""``POST /v1/messages/count_tokens``: an Anthropic body counted as the route would send it. The
route's context is resolved in the pipeline's ``count`` mode (its sources fetched, the context
injected and compressed, no judge asked, nothing written) and the rewritten body counted with
the route's estimator, the one its budget counts with; the answer is Anthropic's
``{"input_tokens": N}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest

from contextplatform.gateway.calls import GatewayCall, gateway_call, resolve_headers
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.lifecycle import authenticated_tenant
from contextplatform.gateway.protocol import Protocol
from contextplatform.gateway.rate_limit import check_rate
from contextplatform.gateway.upstreams import upstream_for
from contextplatform.resolve.use_cases import count_request
from tenants.models import Tenant

PROTOCOL: Protocol = "anthropic"


def counted(tenant: Tenant, call: GatewayCall, headers: Mapping[str, str]) -> dict[str, Any]:
    # The deployment is checked as a call would check it: a route that could not send this body
    # to its deployment has nothing to count.
    loaded, _ = upstream_for(call.route, PROTOCOL)
    # The route's lazy search tools are offered, as they would be on the call.
    resolution = count_request(call.resolve_call(tenant, PROTOCOL, headers, loaded))
    return {"input_tokens": resolution.tokens_after}


async def count_tokens(request: HttpRequest) -> dict[str, Any]:
    """The count's answer; a refusal is raised (``GatewayError``, ``ApiError``) for the view to
    answer in Anthropic's shape."""
    tenant = authenticated_tenant(request)
    await check_rate(request)
    call = gateway_call(PROTOCOL, request.headers, request.body, for_call=False)
    headers = resolve_headers(request.headers)
    answer: dict[str, Any] = await in_tenant(tenant, lambda: counted(tenant, call, headers))
    return answer
