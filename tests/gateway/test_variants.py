"""A route's variants through the gateway: ``x-context-variant`` names the arm beside
``x-context-resolve-id``, the record names it, and the upstream receives that arm's context."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Gateway, unique
from tests.upstream import LoopbackUpstream

MAIN_RULE = "MAIN-ARM-RULE: answer kindly."
VARIANT_RULE = "B-ARM-RULE: answer briefly."


@pytest.fixture
def split_route(gateway: Gateway) -> Iterator[str]:
    name = unique("gw-split")
    body = {
        "name": name,
        "model": {"upstream": gateway.upstream_of(gateway.openai_route)},
        "context": {
            "sources": [{"type": "skill_guardrails", "name": "rules", "texts": [MAIN_RULE]}]
        },
        "variants": [
            {
                "name": "b",
                "weight": 0.5,
                "context": {
                    "sources": [
                        {"type": "skill_guardrails", "name": "brief", "texts": [VARIANT_RULE]}
                    ]
                },
            }
        ],
    }
    with gateway.api() as api:
        response = api.post("/api/v1/routes", json=body)
        assert response.status_code == 201, response.text
        try:
            yield name
        finally:
            api.delete(f"/api/v1/routes/{name}")


def call(gateway: Gateway, route: str, user: str) -> httpx.Response:
    with gateway.api() as api:
        return api.post(
            "/v1/chat/completions",
            json={"model": route, "messages": [{"role": "user", "content": "Where is it?"}]},
            headers={"x-user-id": user},
        )


def test_the_gateway_names_the_arm_and_sends_its_context(
    gateway: Gateway, upstream: LoopbackUpstream, split_route: str
) -> None:
    arms: dict[str, str] = {}
    for index in range(40):
        user = f"gw-user-{index}"
        response = call(gateway, split_route, user)
        assert response.status_code == 200, response.text
        arm = response.headers["x-context-variant"]
        arms[user] = arm
        sent = json.dumps(upstream.last.body)
        if arm == "b":
            assert VARIANT_RULE in sent and MAIN_RULE not in sent
        else:
            assert arm == "main"
            assert MAIN_RULE in sent and VARIANT_RULE not in sent
        record = gateway.replay(response.headers["x-context-resolve-id"])
        assert record["variant"] == arm
    assert set(arms.values()) == {"main", "b"}
    # The same user, the same arm, in this process or any other (a hash, not a memory).
    for user in list(arms)[:5]:
        assert call(gateway, split_route, user).headers["x-context-variant"] == arms[user]


def test_the_gateway_says_main_for_a_route_without_variants(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    response = call(gateway, gateway.openai_route, "gw-plain")
    assert response.status_code == 200, response.text
    assert response.headers["x-context-variant"] == "main"


def test_the_server_places_a_user_as_any_process_would(
    gateway: Gateway, upstream: LoopbackUpstream, split_route: str
) -> None:
    from contextplatform.resolve.arms import arm_for, caller_key

    for index in range(10):
        user = f"placed-{index}"
        here = arm_for(split_route, caller_key(user, None, "unused"), [("b", 0.5)])
        assert call(gateway, split_route, user).headers["x-context-variant"] == here
