"""Compression counters and the hash-chained audit trail of management calls (per tenant schema)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from compression.models import AuditEntry, CompressionStats

GENESIS_HASH = "0" * 64
AUDIT_LOCK = 0x43504144  # "CPAD"


def stats_row() -> CompressionStats:
    row, _ = CompressionStats.objects.get_or_create(pk=1)
    return row


def count(**increments: int) -> None:
    """Add to the tenant's counters (one UPDATE; the row is created by the first count)."""
    updates = {name: F(name) + value for name, value in increments.items()}
    if not CompressionStats.objects.filter(pk=1).update(**updates):
        stats_row()
        CompressionStats.objects.filter(pk=1).update(**updates)


def record_outcome(*, applied: bool, failed: bool, tokens_before: int, tokens_after: int) -> None:
    count(
        requests=1,
        applied=int(applied),
        skipped=int(not applied and not failed),
        failures=int(failed),
        tokens_before=tokens_before,
        tokens_after=tokens_after if applied else tokens_before,
    )


def entry_hash(previous: str, fields: dict[str, Any]) -> str:
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{previous}\n{payload}".encode()).hexdigest()


def audit(
    *, action: str, key_id: int | None, method: str, path: str, status: int, detail: dict[str, Any]
) -> AuditEntry:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", [AUDIT_LOCK]
            )
        last = AuditEntry.objects.order_by("-sequence").first()
        previous = last.hash if last else GENESIS_HASH
        fields = {
            "sequence": (last.sequence + 1) if last else 1,
            "timestamp": timezone.now().isoformat(),
            "action": action,
            "key_id": key_id,
            "method": method,
            "path": path,
            "status": status,
            "detail": detail,
        }
        return AuditEntry.objects.create(
            **fields, previous_hash=previous, hash=entry_hash(previous, fields)
        )


def hashed_fields(entry: AuditEntry) -> dict[str, Any]:
    """What ``entry_hash`` covers, as ``audit`` wrote it."""
    return {
        "sequence": entry.sequence,
        "timestamp": entry.timestamp.isoformat(),
        "action": entry.action,
        "key_id": entry.key_id,
        "method": entry.method,
        "path": entry.path,
        "status": entry.status,
        "detail": entry.detail,
    }


def audit_chain_intact(entries: list[AuditEntry]) -> bool:
    previous = GENESIS_HASH
    for entry in entries:
        if entry.previous_hash != previous or entry.hash != entry_hash(
            previous, hashed_fields(entry)
        ):
            return False
        previous = entry.hash
    return True


def stats_report(audit_limit: int = 100) -> dict[str, Any]:
    row = stats_row()
    entries = list(AuditEntry.objects.order_by("-sequence")[:audit_limit])[::-1]
    return {
        "requests": row.requests,
        "applied": row.applied,
        "skipped": row.skipped,
        "failures": row.failures,
        "tokens_before": row.tokens_before,
        "tokens_after": row.tokens_after,
        "tokens_saved": max(0, row.tokens_before - row.tokens_after),
        "recovery_writes": row.recovery_writes,
        "recovery_reads": row.recovery_reads,
        "recovery_failures": row.recovery_failures,
        "audit": [
            {
                **{name: value for name, value in hashed_fields(e).items() if name != "detail"},
                "previous_hash": e.previous_hash,
                "hash": e.hash,
            }
            for e in entries
        ],
        "audit_chain_intact": audit_chain_intact(entries)
        if entries and entries[0].sequence == 1
        else None,
    }
