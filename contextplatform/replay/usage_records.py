"""The provider's usage written into the resolve's replay record, and the deployment's token
calibration moved by it. The usage arrives after the answer, when the record may still be on its
way to the table (``replay.arrival.await_replay`` waits for it, as completing the turn does).

The record's spend columns are set here too: the usage summed over every upstream call of the
request (``input_tokens`` counts every prompt token, cached reads and cache writes included), and
``cost_usd``: the model's calls at the price of the deployment that answered, plus the judge's
calls of its sources and the compress stage's judge's calls, each at its judge deployment's price,
the parts kept in ``tokens["cost"]``."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from contextplatform.deployments.pricing import Price, usage_cost
from contextplatform.deployments.selectors import deployment_to_call
from contextplatform.deployments.services import CalibrationStep
from contextplatform.protocols.usage import (
    ProviderUsage,
    uncalibrated_input,
    with_provider_usage,
)
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.models import ReplayRecord

logger = logging.getLogger("contextplatform.usage")

# Columns ``apply_usage`` sets, for a save that writes only them.
SPEND_FIELDS = [
    "tokens",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "cost_usd",
    "deployment",
]


def record_usage(
    *, resolve_id: str, usage: ProviderUsage, first_call: ProviderUsage | None = None
) -> bool:
    """Put ``usage`` beside the estimate in the record's ``tokens`` and, once per record, move the
    deployment's calibration toward the observed ratio. False when there is no such record or it
    already holds a provider usage (a repeated answer counts once). The answer was the client's
    (REST): priced at the route's deployment, which the record names."""
    if not await_replay(resolve_id):
        return False
    with transaction.atomic():
        record = ReplayRecord.objects.select_for_update().filter(pk=resolve_id).first()
        if record is None or "provider" in (record.tokens or {}):
            return False
        name = (record.tokens or {}).get("deployment")
        found = deployment_to_call(name) if isinstance(name, str) and name else None
        price = found.effective_price if found is not None else None
        calibration = apply_usage(record, usage, first_call, price=price, deployment=name)
        record.save(update_fields=SPEND_FIELDS)
        if calibration is not None:
            calibration()
    return True


def apply_usage(
    record: ReplayRecord,
    usage: ProviderUsage,
    first_call: ProviderUsage | None = None,
    *,
    price: Price | None = None,
    deployment: str | None = None,
) -> CalibrationStep | None:
    """The usage beside the estimate in the record's ``tokens`` and in its spend columns, priced
    at ``price`` (the answering ``deployment``'s; not saved here); returns the step that moves the
    deployment's calibration toward the observed ratio of the first call (the call the estimate
    is of), for the caller to run when it suits it, or None."""
    record.tokens = with_provider_usage(record.tokens or {}, usage)
    record.input_tokens = usage.input
    record.output_tokens = usage.output
    record.cached_input_tokens = usage.cached_input
    record.cache_write_tokens = usage.cache_write
    if deployment:
        record.deployment = deployment
    set_cost(record, model=usage_cost(price, usage))
    estimated_for = record.tokens.get("deployment")
    estimate = uncalibrated_input(record.tokens)
    if not isinstance(estimated_for, str) or estimate is None:
        return None
    return CalibrationStep(estimated_for, (first_call or usage).input, estimate)


def judge_cost(sources: Any) -> float | None:
    """What the deployment judges of the record's sources cost: the sum of their priced calls;
    None when no source asked a deployment judge, or none of those is priced."""
    costs: list[float] = []
    for source in sources if isinstance(sources, list) else ():
        notes = source.get("notes") if isinstance(source, dict) else None
        usage = notes.get("judge_usage") if isinstance(notes, dict) else None
        cost = usage.get("cost_usd") if isinstance(usage, dict) else None
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            costs.append(float(cost))
    return round(sum(costs), 9) if costs else None


def compression_cost(report: Any) -> float | None:
    """What the compress stage's deployment judge cost (its report's ``judge_usage``, priced as
    the relevance judge's); None when it asked none, or that one is not priced."""
    usage = report.get("judge_usage") if isinstance(report, dict) else None
    cost = usage.get("cost_usd") if isinstance(usage, dict) else None
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        return round(float(cost), 9)
    return None


def set_cost(record: ReplayRecord, *, model: float | None) -> None:
    """``cost_usd``: the priced parts summed (the model's calls, the relevance judge's of the
    sources, the compress stage's judge's); None when none is priced. ``tokens["cost"]`` names
    the parts, None for one that is not priced (or made no call), so a total that left a part
    out says so."""
    judge = judge_cost(record.sources)
    compression = compression_cost(record.compression)
    parts = [part for part in (model, judge, compression) if part is not None]
    record.cost_usd = round(sum(parts), 9) if parts else None
    if parts:
        named = {"model": model, "judge": judge, "compression": compression}
        record.tokens = {**(record.tokens or {}), "cost": named}


def usage_of_record(record: ReplayRecord) -> dict[str, int]:
    """The record's ``usage`` as the API shows it."""
    return {
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cached_input_tokens": record.cached_input_tokens,
        "cache_write_tokens": record.cache_write_tokens,
    }
