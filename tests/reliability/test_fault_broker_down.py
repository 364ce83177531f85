"""A hand-back made while the broker (Redis) is down: the answer is accepted, the turn stays
pending, and once Redis is back the periodic resend (``memory.resend_stranded_turns``, beat)
sends its write, which runs once. A cluster of its own, its resend bound and interval shortened
so the test waits seconds, not minutes."""

from __future__ import annotations

import uuid

import pytest

from scripts.cluster import Cluster
from tests.reliability.test_faults import (
    MEMORY_ROUTE,
    WAIT_S,
    api,
    memories_per_user,
    memory_route,  # noqa: F401 - the module's route, a fixture
    pending,
    resolve_body,
    until,
)

pytestmark = pytest.mark.reliability

CLUSTER_ENV = {"MEMORY_RESEND_AFTER_S": "3", "MEMORY_RESEND_INTERVAL_S": "2"}


def test_a_turn_handed_back_while_redis_is_down_is_written_once_it_is_back(
    cluster: Cluster,
) -> None:
    run = uuid.uuid4().hex[:6]
    users = [f"down-{run}-{index}" for index in range(5)]
    with api(cluster) as client:
        ids = []
        for index, user in enumerate(users):
            text = f"I prefer window seats in row {index + 3}."
            resolved = client.post("/api/v1/resolve", json=resolve_body(MEMORY_ROUTE, user, text))
            assert resolved.status_code == 200, resolved.text
            ids.append(resolved.json()["id"])
    answer = {"choices": [{"message": {"role": "assistant", "content": "Noted."}}]}
    cluster.stop_redis()
    try:
        with api(cluster) as client:
            for resolve_id in ids:
                accepted = client.post(
                    f"/api/v1/resolve/{resolve_id}/response", json={"response": answer}
                )
                assert accepted.status_code == 202, accepted.text
        assert pending(cluster, ids) == len(ids)  # nothing could carry the writes
    finally:
        cluster.start_redis()
    until(lambda: pending(cluster, ids) == 0, timeout_s=WAIT_S, what="the stranded turns written")
    assert memories_per_user(cluster, users) == dict.fromkeys(users, 1)
