"""The provider's usage written into the resolve's replay record, and the deployment's token
calibration moved by it. The usage arrives after the answer, when the record may still be on its
way to the table (``turns.await_replay`` waits for it, as completing the turn does)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from contextplatform.deployments.services import calibrate_deployment
from contextplatform.routing.models import ReplayRecord
from contextplatform.routing.pipeline.turns import await_replay
from contextplatform.routing.pipeline.usage import (
    ProviderUsage,
    uncalibrated_input,
    with_provider_usage,
)

logger = logging.getLogger("contextplatform.usage")


def record_usage(
    *, resolve_id: str, usage: ProviderUsage, first_call: ProviderUsage | None = None
) -> bool:
    """Put ``usage`` beside the estimate in the record's ``tokens`` and, once per record, move the
    deployment's calibration toward the observed ratio. False when there is no such record or it
    already holds a provider usage (a repeated answer counts once)."""
    if not await_replay(resolve_id):
        return False
    with transaction.atomic():
        record = ReplayRecord.objects.select_for_update().filter(pk=resolve_id).first()
        if record is None or "provider" in (record.tokens or {}):
            return False
        record.tokens = with_provider_usage(record.tokens or {}, usage)
        record.save(update_fields=["tokens"])
        deployment = record.tokens.get("deployment")
        estimate = uncalibrated_input(record.tokens)
        if isinstance(deployment, str) and estimate is not None:
            provider_input = (first_call or usage).input
            calibrate_deployment(
                deployment, provider_input=provider_input, estimated_input=estimate
            )
    return True


def record_tool_calls(*, resolve_id: str, calls: list[dict[str, Any]]) -> bool:
    """The served tool calls into the record's ``tool_calls``; False when there is no record."""
    if not await_replay(resolve_id):
        return False
    return ReplayRecord.objects.filter(pk=resolve_id).update(tool_calls=calls) == 1
