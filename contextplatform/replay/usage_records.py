"""The provider's usage written into the resolve's replay record, and the deployment's token
calibration moved by it. The usage arrives after the answer, when the record may still be on its
way to the table (``replay.arrival.await_replay`` waits for it, as completing the turn does)."""

from __future__ import annotations

import logging

from django.db import transaction

from contextplatform.deployments.services import CalibrationStep
from contextplatform.protocols.usage import (
    ProviderUsage,
    uncalibrated_input,
    with_provider_usage,
)
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.models import ReplayRecord

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
        calibration = apply_usage(record, usage, first_call)
        record.save(update_fields=["tokens"])
        if calibration is not None:
            calibration()
    return True


def apply_usage(
    record: ReplayRecord, usage: ProviderUsage, first_call: ProviderUsage | None = None
) -> CalibrationStep | None:
    """The usage beside the estimate in the record's ``tokens`` (not saved here); returns the
    step that moves the deployment's calibration toward the observed ratio of the first call (the
    call the estimate is of), for the caller to run when it suits it, or None."""
    record.tokens = with_provider_usage(record.tokens or {}, usage)
    deployment = record.tokens.get("deployment")
    estimate = uncalibrated_input(record.tokens)
    if not isinstance(deployment, str) or estimate is None:
        return None
    return CalibrationStep(deployment, (first_call or usage).input, estimate)
