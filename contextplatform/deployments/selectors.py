"""Reads of deployments (the tenant is the connection's schema), and ``Upstream``: a deployment
as a caller of the model needs it, its key decrypted."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import QuerySet

from contextplatform.core import secrets
from contextplatform.core.config_cache import ProcessCache
from contextplatform.core.errors import ApiError
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.pricing import Price


def deployment_named(name: str) -> Deployment | None:
    return Deployment.objects.filter(name=name).first()


DEPLOYMENTS = "deployments"
# The deployment a resolve or a gateway call forwards to, kept per process and tenant schema and
# dropped everywhere when a deployment is saved or deleted. Its token calibration moves after
# every answer: the process that moved it keeps the ratio its UPDATE returned in its own copy (its
# next call counts with the new ratio, no read of the deployment again); other processes' copies are at most CALIBRATION_STALENESS_S old, which moves an
# estimate by a fraction of a percent (notifying them would empty their caches at every call).
CALIBRATION_STALENESS_S = 5.0
_called_deployments: ProcessCache[tuple[str, str], Deployment | None] = ProcessCache(
    DEPLOYMENTS, max_age_s=CALIBRATION_STALENESS_S
)


def calibration_moved(name: str, ratio: float | None, samples: int) -> None:
    """This process's copy takes the calibration its writer just stored (what the UPDATE
    returned, other processes' moves included): its next call counts with the new ratio, and
    nobody reads the deployment again for it. A copy of the kept one, as kept copies are shared
    and never changed; nothing kept, nothing to do (the next call reads it)."""
    key = (connection.schema_name, name)
    found, kept = _called_deployments.peek(key)
    if not found or kept is None:
        return
    moved = copy.copy(kept)
    moved.calibration, moved.calibration_samples = ratio, samples
    _called_deployments.replace(key, moved)


def deployment_to_call(name: str) -> Deployment | None:
    """``deployment_named`` for the call path, kept per process: shared by this process's
    requests, so read it and never change or save it (writes read ``deployment_named``)."""
    return _called_deployments.get((connection.schema_name, name), lambda: deployment_named(name))


def deployments() -> QuerySet[Deployment]:
    return Deployment.objects.order_by("name")


@dataclass(frozen=True)
class Upstream:
    """Where and how to call a deployment's model. The key is left out of ``repr`` so that a
    logged or traced ``Upstream`` never shows it."""

    protocol: str
    base_url: str
    model: str
    api_key: str | None = field(repr=False)
    timeout_ms: int
    context_window: int
    max_output_tokens: int | None
    headers: dict[str, str] = field(repr=False)
    may_judge: bool
    name: str
    # What this deployment's tokens cost (its own price, else its model's public one); None =
    # unpriced: costs are unknown, never guessed.
    price: Price | None = None
    # What the gateway sends it a minute at most (None: no limit).
    rpm: int | None = None
    tpm: int | None = None
    # How a call reaches it on the wire when that differs from ``protocol``: a Responses
    # deployment serves the gateway's Responses calls, whose pipeline speaks Chat Completions
    # (``protocol`` "openai", ``wire`` "openai_responses"; ``forward`` translates).
    wire: str = ""


def upstream_of(deployment: Deployment) -> Upstream:
    """The deployment with its key and header values decrypted; one no configured secret key
    reads is the operator's to fix (503, naming the deployment, never the secret)."""
    try:
        api_key = (
            secrets.decrypt(deployment.api_key_encrypted) if deployment.api_key_encrypted else None
        )
        headers = {
            str(name): secrets.decrypt(token)
            for name, token in (deployment.headers_encrypted or {}).items()
        }
    except secrets.SecretUnreadable:
        raise ApiError(
            "deployment_key_unreadable",
            f"deployment {deployment.name!r}: its API key or a header value cannot be decrypted "
            "with the configured DEPLOYMENT_SECRET_KEYS",
            status=503,
        ) from None
    return Upstream(
        protocol=deployment.protocol,
        base_url=deployment.base_url,
        model=deployment.model,
        api_key=api_key,
        timeout_ms=deployment.timeout_ms,
        context_window=deployment.context_window,
        max_output_tokens=deployment.max_output_tokens,
        headers=headers,
        may_judge=deployment.may_judge,
        name=deployment.name,
        price=deployment.effective_price,
        rpm=(deployment.limits or {}).get("rpm"),
        tpm=(deployment.limits or {}).get("tpm"),
    )


def called_upstream(deployment: Deployment) -> Upstream:
    """``upstream_of`` a deployment of ``deployment_to_call``, decrypted once per kept copy: the
    copy is shared and never changed (a change is a new copy), so neither is its ``Upstream``."""
    upstream: Upstream | None = deployment.__dict__.get("_called_upstream")
    if upstream is None:
        upstream = deployment.__dict__["_called_upstream"] = upstream_of(deployment)
    return upstream
