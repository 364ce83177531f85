"""Reads of deployments (the tenant is the connection's schema), and ``Upstream``: a deployment
as a caller of the model needs it, its key decrypted."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from contextplatform.core import secrets
from contextplatform.core.errors import ApiError
from contextplatform.deployments.models import Deployment


def deployment_named(name: str) -> Deployment | None:
    return Deployment.objects.filter(name=name).first()


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
    headers: dict[str, str]
    may_judge: bool
    name: str


def upstream_of(deployment: Deployment) -> Upstream:
    """The deployment with its key decrypted; a key no configured secret key reads is the
    operator's to fix (503, naming the deployment, never the key)."""
    api_key = None
    if deployment.api_key_encrypted:
        try:
            api_key = secrets.decrypt(deployment.api_key_encrypted)
        except secrets.SecretUnreadable:
            raise ApiError(
                "deployment_key_unreadable",
                f"deployment {deployment.name!r}: its API key cannot be decrypted with the "
                "configured DEPLOYMENT_SECRET_KEYS",
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
        headers={str(k): str(v) for k, v in (deployment.headers or {}).items()},
        may_judge=deployment.may_judge,
        name=deployment.name,
    )
