"""Handed-back turns whose write could not be sent (the broker was down at the hand-back) are
sent again by the periodic ``memory.resend_stranded_turns``; turns merely waiting are left alone
(real PostgreSQL, tasks inline)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from django_tenants.utils import schema_context

from memory.models import MemoryTurn
from memory.tasks import resend_stranded_turns_task
from tests.conftest import ApiClient, TenantFixture
from tests.memory.test_memory_flow import memory_route, resolve


def turn(api: ApiClient, user: str, text: str) -> str:
    resolved = resolve(api, text, user=user)
    assert resolved.status_code == 200, resolved.content
    return str(resolved.json()["id"])


def test_a_turn_whose_send_was_lost_is_sent_again_and_written_once(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    acme_api.post("/api/v1/routes", memory_route(store={"auto": True}))
    lost = turn(acme_api, "u_lost", "I prefer window seats on long flights.")
    recent = turn(acme_api, "u_recent", "I prefer aisle seats on short flights.")
    waiting = turn(acme_api, "u_waiting", "I live in Lisbon.")  # never handed back
    long_ago = timezone.now() - timedelta(seconds=10 * 60)
    with schema_context(acme.schema):
        # As the hand-back leaves them when the broker could not be reached: the answer stored,
        # the turn pending.
        MemoryTurn.objects.filter(resolve_id=lost).update(
            assistant_text="Noted.", handed_back_at=long_ago
        )
        MemoryTurn.objects.filter(resolve_id=recent).update(
            assistant_text="Noted.", handed_back_at=timezone.now()
        )
    assert resend_stranded_turns_task() == {acme.schema: 1}
    with schema_context(acme.schema):
        statuses = dict(MemoryTurn.objects.values_list("resolve_id", "status"))
        assert statuses[lost] == "written"
        assert statuses[recent] == statuses[waiting] == "pending"
        assert MemoryTurn.objects.get(resolve_id=lost).added == 1
    assert resend_stranded_turns_task() == {}  # written: nothing more to send


def test_the_hand_back_records_when_the_write_was_sent(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    acme_api.post("/api/v1/routes", memory_route(store={"auto": True}))
    resolve_id = turn(acme_api, "u_time", "I prefer window seats.")
    before = timezone.now()
    answer = {"choices": [{"message": {"role": "assistant", "content": "Noted."}}]}
    accepted = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": answer})
    assert accepted.status_code == 202, accepted.content
    with schema_context(acme.schema):
        handed = MemoryTurn.objects.get(resolve_id=resolve_id)
    assert handed.handed_back_at is not None and handed.handed_back_at >= before
