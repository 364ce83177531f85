"""Recovery originals: stored per request, returned only to the tenant, route, user and request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from compression.config import RecoveryConfig
from compression.engine import CompressionFailed
from compression.models import RecoveryBlob
from compression.recovery import DatabaseRecoveryWriter
from compression.stats import stats_report
from compression.tasks import purge_expired_recovery
from tenants.services import issue_api_key
from tests.conftest import ApiClient


def store(
    schema: str,
    request_id: str = "rsv_1",
    user: str | None = "u1",
    route: str = "support",
    **limits: Any,
) -> None:
    with schema_context(schema):
        writer = DatabaseRecoveryWriter(
            request_id=request_id, route=route, user=user, config=RecoveryConfig(**limits)
        )
        writer.store([("k1", "original one"), ("k2", "original two")])


def retrieve(api: ApiClient, **body: Any) -> Any:
    return api.post(
        "/api/v1/storage/context-recovery/retrieve", {"request_id": "rsv_1", "key": "k1", **body}
    )


def test_the_request_that_stored_an_original_gets_it_back(acme_api: ApiClient, acme: Any) -> None:
    store(acme.schema)
    response = retrieve(acme_api, user="u1", route="support")
    assert response.status_code == 200
    assert response.json()["content"] == "original one"


@pytest.mark.parametrize(
    "body",
    [
        {"user": "u2"},  # another user
        {},  # no user
        {"user": "u1", "route": "other"},  # another route
        {"user": "u1", "request_id": "rsv_2"},  # another request
        {"user": "u1", "key": "k9"},  # a key never issued
    ],
)
def test_nobody_else_gets_it(acme_api: ApiClient, acme: Any, body: dict[str, Any]) -> None:
    store(acme.schema)
    response = retrieve(acme_api, **body)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_another_tenant_gets_nothing(acme: Any, globex_api: ApiClient) -> None:
    store(acme.schema)
    assert retrieve(globex_api, user="u1").status_code == 404


def test_retrievals_per_request_are_limited(acme_api: ApiClient, acme: Any) -> None:
    store(acme.schema, max_retrievals=3)
    codes = [retrieve(acme_api, user="u1", key=key).status_code for key in ("k1", "k2", "k1", "k2")]
    assert codes == [200, 200, 200, 429]


def test_expired_originals_are_gone_and_purged(acme_api: ApiClient, acme: Any) -> None:
    store(acme.schema)
    with schema_context(acme.schema):
        RecoveryBlob.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert retrieve(acme_api, user="u1").status_code == 404
    assert purge_expired_recovery()["acme"] == 2
    with schema_context(acme.schema):
        assert not RecoveryBlob.objects.exists()


def test_byte_limits_refuse_the_write(acme: Any) -> None:
    with pytest.raises(CompressionFailed, match="per-request limit"):
        store(acme.schema, max_bytes_per_request=10)
    store(acme.schema, request_id="rsv_a", max_total_bytes=30)
    with pytest.raises(CompressionFailed, match="byte limit exceeded"):
        store(acme.schema, request_id="rsv_b", max_total_bytes=30)
    with schema_context(acme.schema):
        assert set(RecoveryBlob.objects.values_list("request_id", flat=True)) == {"rsv_a"}


def test_refusals_are_counted(acme_api: ApiClient, acme: Any) -> None:
    def failures() -> int:
        with schema_context(acme.schema):
            return stats_report()["recovery_failures"]

    before = failures()
    with pytest.raises(CompressionFailed, match="byte limit exceeded"):
        store(acme.schema, max_total_bytes=1)
    store(acme.schema, max_retrievals=1)
    assert retrieve(acme_api, user="u2").status_code == 404
    assert retrieve(acme_api, user="u1").status_code == 200
    assert retrieve(acme_api, user="u1").status_code == 429
    assert failures() == before + 3


def test_invalidate_needs_manage_scope_and_is_audited(acme_api: ApiClient, acme: Any) -> None:
    store(acme.schema)
    store(acme.schema, request_id="rsv_other")
    body = {"route": "support", "user": "u1", "request_id": "rsv_1"}
    narrow = ApiClient(issue_api_key(tenant=acme.tenant, scopes="compression.read").plain_key)
    assert narrow.post("/api/v1/storage/context-recovery/invalidate", body).status_code == 403
    response = acme_api.post("/api/v1/storage/context-recovery/invalidate", body)
    assert response.json() == {"deleted": 2}
    assert retrieve(acme_api, user="u1").status_code == 404
    with schema_context(acme.schema):
        assert RecoveryBlob.objects.filter(request_id="rsv_other").count() == 2
        report = stats_report()
    assert [entry["action"] for entry in report["audit"]][-1] == "compression.recovery.invalidate"
    assert report["audit_chain_intact"] is True
    assert report["recovery_writes"] >= 4 and report["recovery_reads"] == 0


def test_stats_capabilities_and_health(acme_api: ApiClient) -> None:
    stats = acme_api.get("/api/v1/observability/plugins/context/compression/stats").json()
    for field in (
        "requests",
        "applied",
        "skipped",
        "failures",
        "tokens_before",
        "tokens_after",
        "tokens_saved",
        "recovery_writes",
        "recovery_reads",
        "recovery_failures",
        "audit",
    ):
        assert field in stats
    capabilities = acme_api.get("/api/v1/plugins/context/compression/capabilities").json()
    assert (
        "recoverable" in capabilities["strategies"]
        and capabilities["json_structure_preserved"] is True
    )
    assert acme_api.get("/api/v1/plugins/context/compression/health").json()["status"] == "healthy"


def test_audit_chain_detects_tampering(acme: Any) -> None:
    from compression.models import AuditEntry
    from compression.stats import audit, audit_chain_intact

    with schema_context(acme.schema):
        for index in range(3):
            audit(
                action="compression.preview",
                key_id=None,
                method="POST",
                path="/p",
                status=200,
                detail={"i": index},
            )
        entries = list(AuditEntry.objects.order_by("sequence"))
        assert audit_chain_intact(entries)
        AuditEntry.objects.filter(sequence=2).update(status=500)
        assert not audit_chain_intact(list(AuditEntry.objects.order_by("sequence")))
