"""Writes of deployments: create, update, delete (validated), and re-encryption of their keys.

The API key and the header values are write-only. They are encrypted here, before they reach the
model, and no function of this module logs them or puts them in an error message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from django.db import IntegrityError, connection, transaction

from contextplatform.core import secrets
from contextplatform.core.config_cache import changed
from contextplatform.core.errors import ApiError, invalid_request
from contextplatform.core.validation import parse
from contextplatform.deployments import calibration
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import READ_ONLY_FIELDS, DeploymentSpec
from contextplatform.deployments.selectors import DEPLOYMENTS, calibration_moved


class _Keep(Enum):
    KEEP = "keep"


# ``api_key=KEEP_KEY``: leave the stored key as it is (a PUT or PATCH that does not name it).
KEEP_KEY: Final = _Keep.KEEP
KeyChange = str | None | _Keep


def parse_deployment(data: Any, *, prefix: str = "") -> DeploymentSpec:
    """A written deployment validated (a representation's read-only fields are ignored)."""
    if isinstance(data, dict):
        data = {key: value for key, value in data.items() if key not in READ_ONLY_FIELDS}
    return parse(DeploymentSpec, data, prefix=prefix)


def key_change(spec: DeploymentSpec) -> KeyChange:
    """What a written body says of the key: absent keeps it, null clears it, a text replaces it."""
    return spec.api_key if "api_key" in spec.model_fields_set else KEEP_KEY


def headers_given(spec: DeploymentSpec) -> bool:
    """Whether the written body names its headers: absent keeps the stored ones, an object
    replaces them all, ``null`` or ``{}`` removes them."""
    return "headers" in spec.model_fields_set


def encrypted_headers(headers: dict[str, str] | None) -> dict[str, str]:
    return {name: secrets.encrypt(value) for name, value in (headers or {}).items()}


def _apply(
    deployment: Deployment, spec: DeploymentSpec, api_key: KeyChange, replace_headers: bool
) -> None:
    deployment.name = spec.name
    deployment.protocol = spec.protocol
    deployment.base_url = spec.base_url
    deployment.model = spec.model
    deployment.timeout_ms = spec.timeout_ms
    deployment.context_window = spec.context_window
    deployment.max_output_tokens = spec.max_output_tokens
    if replace_headers:
        deployment.headers_encrypted = encrypted_headers(spec.headers)
    deployment.may_judge = spec.may_judge
    deployment.price = spec.price.model_dump() if spec.price is not None else None
    deployment.limits = spec.limits.stored() if spec.limits is not None else {}
    if api_key is not KEEP_KEY:
        deployment.api_key_encrypted = secrets.encrypt(api_key) if api_key else ""


def _conflict(name: str) -> ApiError:
    return ApiError("conflict", f"deployment {name!r} already exists", status=409, param="name")


def create_deployment(*, spec: DeploymentSpec, api_key: KeyChange = KEEP_KEY) -> Deployment:
    """Save a new deployment; ``api_key`` defaults to the spec's own (none when absent)."""
    deployment = Deployment()
    _apply(deployment, spec, spec.api_key if api_key is KEEP_KEY else api_key, True)
    try:
        with transaction.atomic():
            deployment.save()
    except IntegrityError:
        raise _conflict(spec.name) from None
    return deployment


def update_deployment(
    *,
    deployment: Deployment,
    spec: DeploymentSpec,
    api_key: KeyChange = KEEP_KEY,
    replace_headers: bool | None = None,
) -> Deployment:
    """Replace a deployment's fields; the key changes only as ``api_key`` says, the headers only
    when the spec names them (or as ``replace_headers`` says)."""
    if spec.name != deployment.name and Deployment.objects.filter(name=spec.name).exists():
        raise _conflict(spec.name)
    replace = headers_given(spec) if replace_headers is None else replace_headers
    _apply(deployment, spec, api_key, replace)
    try:
        with transaction.atomic():
            deployment.save()
    except IntegrityError:
        raise _conflict(spec.name) from None
    return deployment


def upsert_deployment(*, spec: DeploymentSpec, api_key: KeyChange = KEEP_KEY) -> Deployment:
    existing = Deployment.objects.filter(name=spec.name).first()
    if existing is None:
        return create_deployment(spec=spec, api_key=api_key)
    return update_deployment(deployment=existing, spec=spec, api_key=api_key)


def delete_deployment(*, deployment: Deployment) -> None:
    """Delete it; ``DeploymentInUse`` (409 ``conflict``, naming the routes) while configuration
    names it. A rename in ``update_deployment`` is refused the same way (``usage``'s guards).

    In a savepoint of its own: the refusal is raised inside the delete's transaction, which would
    otherwise leave a caller's enclosing transaction unusable."""
    with transaction.atomic():
        deployment.delete()


def rotate_keys() -> int:
    """Re-encrypt every stored key and header value of the current schema under the newest key;
    the count.

    A token no configured key decrypts is reported, not skipped: rotation that leaves a key
    behind would let the operator drop the only key that still reads it."""
    rotated = 0
    with transaction.atomic():
        for deployment in Deployment.objects.select_for_update():
            try:
                token = (
                    secrets.rotate(deployment.api_key_encrypted)
                    if deployment.api_key_encrypted
                    else ""
                )
                headers = {
                    name: secrets.rotate(value)
                    for name, value in (deployment.headers_encrypted or {}).items()
                }
            except secrets.SecretUnreadable:
                raise invalid_request(
                    f"deployment {deployment.name!r}: its key or a header is not readable with "
                    "DEPLOYMENT_SECRET_KEYS; add the key it was written with, then rotate again"
                ) from None
            if not token and not headers:
                continue
            Deployment.objects.filter(pk=deployment.pk).update(
                api_key_encrypted=token, headers_encrypted=headers
            )
            rotated += bool(token) + len(headers)
        if rotated:
            changed(DEPLOYMENTS)  # an update() sends no signal; kept copies hold the old tokens
    return rotated


@dataclass(frozen=True)
class CalibrationStep:
    """One answer's observation for a deployment's calibration, applied when called (alone), or
    with the others of a batch by ``calibrate_deployments`` (the replay writer does so)."""

    deployment: str
    provider_input: int
    estimated_input: float

    def __call__(self) -> None:
        calibrate_deployments([self])


# Steps folded into one UPDATE at most: the expression nests one level per step.
CALIBRATION_STEPS_PER_STATEMENT = 32


def _calibration_sql(table: str, steps: int) -> str:
    """One UPDATE moving a deployment's ratio by ``steps`` observations in turn: each step
    ``calibration.next_ratio`` written in SQL over the one before, from the row as the UPDATE
    locked it (concurrent writers never lose an update), in the same double-precision arithmetic
    and order as the formula."""
    ratio = "COALESCE(calibration, %s::float8)"
    for _ in range(steps):
        ratio = f"LEAST(%s::float8, GREATEST(%s::float8, %s::float8 * {ratio} + %s::float8 * %s::float8))"
    return (
        f"UPDATE {table} SET calibration = {ratio}, "
        "calibration_samples = calibration_samples + %s WHERE name = %s "
        "RETURNING calibration, calibration_samples"
    )


def _calibration_params(ratios: list[float], name: str) -> list[Any]:
    """The parameters in the order the nested text reads them: every step's bounds and weight
    of the ratio so far (outermost first), the starting ratio, then every step's weight of its
    observation and the observation (innermost, the first applied, first)."""
    keep = 1 - calibration.ALPHA
    outer = [calibration.MAX_RATIO, calibration.MIN_RATIO, keep] * len(ratios)
    inner = [value for ratio in ratios for value in (calibration.ALPHA, ratio)]
    return [*outer, calibration.INITIAL_RATIO, *inner, len(ratios), name]


def calibrate_deployments(steps: Iterable[CalibrationStep]) -> int:
    """Apply the steps in order (``calibration.next_ratio`` per observation), each deployment's in
    one UPDATE (up to ``CALIBRATION_STEPS_PER_STATEMENT`` steps a statement), which holds its row
    while it computes, so concurrent writers never lose an update; then this process's copy of
    each moved deployment takes the ratio the UPDATE returned (no read of it again). The number
    of deployments moved."""
    observed: dict[str, list[float]] = {}
    for step in steps:
        ratio = calibration.observed_ratio(step.provider_input, step.estimated_input)
        if ratio is not None:
            observed.setdefault(step.deployment, []).append(ratio)
    moved = 0
    table = Deployment._meta.db_table
    for name, ratios in observed.items():
        row = None
        with connection.cursor() as cursor:
            for start in range(0, len(ratios), CALIBRATION_STEPS_PER_STATEMENT):
                chunk = ratios[start : start + CALIBRATION_STEPS_PER_STATEMENT]
                cursor.execute(
                    _calibration_sql(table, len(chunk)), _calibration_params(chunk, name)
                )
                row = cursor.fetchone()
                if row is None:
                    break  # no such deployment
        if row is None:
            continue
        calibration_moved(name, row[0], row[1])
        moved += 1
    return moved
