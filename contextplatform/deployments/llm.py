"""Deployments as the platform's own model callers ask them: the relevance judge and the memory
extractor name a deployment, and the name is looked up here.

A name is a deployment of the tenant first (``Deployment``: OpenAI or Anthropic protocol, its key
decrypted), else an entry of ``settings.LLM_DEPLOYMENTS`` (the platform's defaults, which keep
working as they did). A tenant's deployment is tenant configuration, so the ``LLMDeployment`` made
of it carries the tenant's outbound allow-list and the kernel's client calls it through the
outbound guard; the platform's entries are the operator's and are called as before.

Tenant deployments live in the tenant's schema: they are read only when the connection is in
one (a name given in the public schema, a test or a command, is the platform's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from django.db import connection
from django_tenants.utils import get_public_schema_name

from contextplatform.core import llm
from contextplatform.core.errors import ApiError
from contextplatform.core.llm import LLMDeployment, LLMError
from contextplatform.deployments.pricing import Price, default_price
from contextplatform.deployments.selectors import (
    Upstream,
    deployment_named,
    deployments,
    upstream_of,
)
from contextplatform.protocols.registry import PROTOCOLS

LOCAL = "local"  # the local judge and the local extractor: never a deployment's name


@dataclass(frozen=True)
class NamedDeployment:
    """A deployment found by name, and what the judge needs to know of it."""

    llm: LLMDeployment
    origin: Literal["tenant", "platform"]
    may_judge: bool
    # What its tokens cost (a judge's calls are priced with it); None: unpriced.
    price: Price | None = None


def in_tenant_schema() -> bool:
    schema = getattr(connection, "schema_name", None)
    return bool(schema) and schema != get_public_schema_name()


def current_allowlist() -> tuple[str, ...]:
    """The outbound allow-list of the tenant whose schema the connection is in (the tenants table
    lives in public, which every tenant's search path includes)."""
    from tenants.models import Tenant

    if not in_tenant_schema():
        return ()
    entries = (
        Tenant.objects.filter(schema_name=connection.schema_name)
        .values_list("outbound_allowlist", flat=True)
        .first()
    )
    return tuple(str(entry) for entry in entries or ())


def llm_deployment_of(upstream: Upstream, allowlist: Sequence[str]) -> LLMDeployment:
    """A tenant's deployment as the kernel's client asks it: its protocol, its base URL as the
    provider's SDK takes it, its extra headers, its output cap, guarded with ``allowlist``."""
    return LLMDeployment(
        name=upstream.name,
        url=upstream.base_url,
        model=upstream.model,
        api_key=upstream.api_key,
        timeout_ms=upstream.timeout_ms,
        max_tokens=upstream.max_output_tokens,
        protocol=upstream.protocol if upstream.protocol in PROTOCOLS else "openai",
        sdk_base_url=True,
        extra_headers=tuple(sorted(upstream.headers.items())),
        allowlist=tuple(allowlist),
    )


def tenant_deployment(name: str, allowlist: Sequence[str] | None = None) -> NamedDeployment | None:
    """The tenant's deployment called ``name`` (None when there is none, or outside a tenant's
    schema); LLMError when its key cannot be read."""
    if not in_tenant_schema():
        return None
    deployment = deployment_named(name)
    if deployment is None:
        return None
    try:
        upstream = upstream_of(deployment)
    except ApiError as error:  # the key no configured secret reads: the caller's error path
        raise LLMError(error.message) from None
    guard = current_allowlist() if allowlist is None else allowlist
    return NamedDeployment(
        llm=llm_deployment_of(upstream, guard),
        origin="tenant",
        may_judge=upstream.may_judge,
        price=upstream.price,
    )


def named_deployment(name: str, allowlist: Sequence[str] | None = None) -> NamedDeployment | None:
    """The deployment called ``name``: the tenant's, else the platform's (settings); None when
    neither has one. ``allowlist`` is the tenant's outbound allow-list when the caller has it
    (a resolve does), else it is read. LLMError for a broken entry or an unreadable key."""
    found = tenant_deployment(name, allowlist)
    if found is not None:
        return found
    configured = llm.configured_deployment(name)
    if configured is None:
        return None
    return NamedDeployment(
        llm=configured, origin="platform", may_judge=True, price=default_price(configured.model)
    )


def known_names() -> list[str]:
    """Every deployment name a judge or an extractor may give: the tenant's and the platform's,
    sorted."""
    tenant = list(deployments().values_list("name", flat=True)) if in_tenant_schema() else []
    return sorted({*tenant, *llm.known_deployments()} - {LOCAL})


def unknown_name_message(name: str, what: str = "deployment", also: Sequence[str] = ()) -> str:
    """Why ``name`` names no deployment, in the words every caller uses (``what``: "judge
    deployment", ...); ``also`` are the names the caller accepts besides deployments (the
    judge's ``local``)."""
    known = ", ".join([*also, *known_names()]) or "none"
    return (
        f"unknown {what} {name!r} (known: {known}): neither this tenant's deployments "
        "(/api/v1/deployments) nor the platform's (LLM_DEPLOYMENTS) have that name"
    )
