"""Recovery blobs in PostgreSQL: written by a compressed request, read back only by that request."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from compression.config import RecoveryConfig
from compression.engine import CompressionFailed
from compression.models import RecoveryBlob
from compression.stats import count

# One advisory lock per tenant schema serialises the total-bytes check against concurrent writers.
LOCK_NAMESPACE = 0x43505256  # "CPRV"


class RecoveryError(Exception):
    def __init__(self, code: str, message: str, status: int):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class DatabaseRecoveryWriter:
    """The engine's RecoveryWriter for one request."""

    def __init__(self, *, request_id: str, route: str, user: str | None, config: RecoveryConfig):
        self.request_id = request_id
        self.route = route
        self.user = user or ""
        self.config = config

    def store(self, originals: Sequence[tuple[str, str]]) -> None:
        sizes = [len(text.encode()) for _, text in originals]
        if sum(sizes) > self.config.max_bytes_per_request:
            count(recovery_failures=1)
            raise CompressionFailed(
                f"recovery originals need {sum(sizes)} bytes; the per-request limit is "
                f"{self.config.max_bytes_per_request}"
            )
        now = timezone.now()
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", [LOCK_NAMESPACE]
                )
            RecoveryBlob.objects.filter(expires_at__lte=now).delete()
            stored = RecoveryBlob.objects.aggregate(total=Sum("size_bytes"))["total"] or 0
            full = stored + sum(sizes) > self.config.max_total_bytes
            if not full:
                self._insert(originals, sizes, now)
        if full:  # counted outside the transaction, which a raise inside would roll back
            count(recovery_failures=1)
            raise CompressionFailed("recovery store byte limit exceeded")
        count(recovery_writes=len(originals))

    def _insert(
        self, originals: Sequence[tuple[str, str]], sizes: list[int], now: datetime
    ) -> None:
        RecoveryBlob.objects.bulk_create(
            [
                RecoveryBlob(
                    request_id=self.request_id,
                    route=self.route,
                    user_id=self.user,
                    key=key,
                    content=text,
                    size_bytes=size,
                    max_retrievals=self.config.max_retrievals,
                    expires_at=now + timedelta(seconds=self.config.ttl_seconds),
                )
                for (key, text), size in zip(originals, sizes, strict=True)
            ],
            ignore_conflicts=True,  # the same original twice in one request has one key
        )


def retrieve(*, request_id: str, key: str, route: str | None, user: str | None) -> str:
    """The original, if this request issued the key, for the same route and user, before it expires."""
    with transaction.atomic():
        blob = (
            RecoveryBlob.objects.select_for_update()
            .filter(request_id=request_id, key=key, expires_at__gt=timezone.now())
            .first()
        )
        refusal = refused(blob, request_id=request_id, route=route, user=user)
        if refusal is None:
            RecoveryBlob.objects.filter(pk=blob.pk).update(retrievals=F("retrievals") + 1)
    if refusal is not None:
        count(recovery_failures=1)
        raise refusal
    count(recovery_reads=1)
    return blob.content


def refused(
    blob: RecoveryBlob | None, *, request_id: str, route: str | None, user: str | None
) -> RecoveryError | None:
    if blob is None or (route is not None and blob.route != route) or blob.user_id != (user or ""):
        return RecoveryError(
            "not_found", "no such recovery key for this request, route and user", 404
        )
    used = (
        RecoveryBlob.objects.filter(request_id=request_id).aggregate(n=Sum("retrievals"))["n"] or 0
    )
    if used >= blob.max_retrievals:
        return RecoveryError(
            "rate_limited",
            f"this request may retrieve at most {blob.max_retrievals} originals",
            429,
        )
    return None


def invalidate(*, route: str, user: str, request_id: str) -> int:
    deleted, _ = RecoveryBlob.objects.filter(
        route=route, user_id=user, request_id=request_id
    ).delete()
    return deleted


def purge_expired() -> int:
    deleted, _ = RecoveryBlob.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted
