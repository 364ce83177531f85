"""``routing.use_cases``: the resolve use case owns the refusal, the session turn and the source
kinds' after-resolve hooks; the hand-back reaches every kind's after-response hook."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django_tenants.utils import schema_context

from sources.models import ChatMessage
from tests.conftest import ApiClient, TenantFixture
from tests.resolve import source_kinds_for_tests as kinds

QUESTION = "Where is my parcel?"
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "On its way."}}]}


@pytest.fixture(autouse=True)
def heard() -> Iterator[None]:
    kinds.RESOLVED_TURNS.clear()
    kinds.ANSWERS.clear()
    yield
    kinds.RESOLVED_TURNS.clear()
    kinds.ANSWERS.clear()


def make_route(api: ApiClient, sources: list[dict[str, Any]]) -> None:
    response = api.post("/api/v1/routes", {"name": "hooks", "context": {"sources": sources}})
    assert response.status_code == 201, response.content


def resolve(api: ApiClient, **extra: Any) -> Any:
    request = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    return api.post("/api/v1/resolve", {"route": "hooks", "request": request, **extra})


HOOK = {"type": "test_turn_hook", "name": "hook"}


def test_each_enabled_source_hears_the_accepted_turn(acme_api: ApiClient) -> None:
    make_route(
        acme_api,
        [HOOK, {**HOOK, "name": "other"}, {**HOOK, "name": "off", "enabled": False}],
    )
    response = resolve(acme_api, user="u_1", session="s_1", memory={"store": False})
    assert response.status_code == 200, response.content
    resolve_id = response.json()["id"]
    assert [name for name, _ in kinds.RESOLVED_TURNS] == ["hook", "other"]
    turn = kinds.RESOLVED_TURNS[0][1]
    assert (turn.resolve_id, turn.route, turn.user, turn.session) == (
        resolve_id,
        "hooks",
        "u_1",
        "s_1",
    )
    assert (turn.user_text, turn.store_requested) == (QUESTION, False)


def test_a_refused_resolve_starts_no_turn(acme_api: ApiClient, acme: TenantFixture) -> None:
    make_route(acme_api, [HOOK, {**HOOK, "name": "gate", "fail": True, "on_failure": "block"}])
    response = resolve(acme_api, user="u_1", session="s_refused")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "source_failed" and error["param"] == "sources.gate"
    assert "'gate' failed and the route says on_failure: block" in error["message"]
    assert kinds.RESOLVED_TURNS == []
    with schema_context(acme.schema):
        assert not ChatMessage.objects.filter(session__key="s_refused").exists()


def test_the_hand_back_reaches_the_after_response_hook_once(acme_api: ApiClient) -> None:
    make_route(acme_api, [HOOK])
    resolve_id = resolve(acme_api, user="u_1").json()["id"]
    first = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": ANSWER})
    assert first.status_code == 202, first.content
    assert first.json()["memory_write"] == "queued"  # a kind acted on the answer
    again = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": ANSWER})
    assert again.json()["duplicate"] is True
    assert [(resolve_id, "On its way.")] == kinds.ANSWERS


def test_a_kind_that_served_nothing_does_not_act_on_the_answer(acme_api: ApiClient) -> None:
    make_route(acme_api, [{"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}])
    resolve_id = resolve(acme_api, user="u_1").json()["id"]
    answer = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": ANSWER})
    assert answer.json()["memory_write"] == "none"
    assert kinds.ANSWERS == []


def test_the_usage_of_a_handed_back_answer_lands_in_the_replay_record_once(
    acme_api: ApiClient,
) -> None:
    make_route(acme_api, [HOOK])
    resolve_id = resolve(acme_api, user="u_1").json()["id"]
    answer = {**ANSWER, "usage": {"prompt_tokens": 321, "completion_tokens": 12}}
    first = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": answer})
    assert first.status_code == 202, first.content
    again = {**ANSWER, "usage": {"prompt_tokens": 999, "completion_tokens": 99}}
    repeated = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": again})
    assert repeated.json()["duplicate"] is True
    tokens = acme_api.get(f"/api/v1/replay/{resolve_id}").json()["tokens"]
    assert tokens["provider"] == {"input": 321, "output": 12}
    assert tokens["label"] == "estimated"


def test_an_answer_without_usage_records_none(acme_api: ApiClient) -> None:
    make_route(acme_api, [HOOK])
    resolve_id = resolve(acme_api, user="u_1").json()["id"]
    handed = acme_api.post(f"/api/v1/resolve/{resolve_id}/response", {"response": ANSWER})
    assert handed.status_code == 202, handed.content
    assert "provider" not in acme_api.get(f"/api/v1/replay/{resolve_id}").json()["tokens"]
