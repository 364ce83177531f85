"""Pre-warm of a ``realtime_apis`` source: the connectors that need no ``{query}`` and may be
cached are read when the session opens, and served at the next resolve while younger than their
``cache_ttl_seconds``; the others are called live."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.conftest import ApiClient
from tests.loopback import Service, json_reply
from tests.sources.realtime.conftest import create, live_route, live_source, resolve


def ids() -> tuple[str, str]:
    token = uuid.uuid4().hex[:8]
    return f"u_{token}", f"s_{token}"


def prewarm(api: ApiClient, session: str, user: str) -> dict[str, Any]:
    response = api.post(f"/api/v1/sessions/{session}/prewarm", {"route": "r", "user": user})
    assert response.status_code == 202, response.content
    return response.json()


def connectors(balance: Service, search: Service, ttl: int = 60) -> list[dict[str, Any]]:
    return [
        {
            "name": "balance",
            "url": balance.url("/accounts/{user}"),
            "select": "$.value",
            "cache_ttl_seconds": ttl,
        },
        {"name": "search", "url": search.url("/search?q={query}"), "cache_ttl_seconds": ttl},
    ]


def test_query_free_connectors_are_read_ahead_and_served_at_the_next_resolve(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    service.responder = lambda seen: json_reply({"value": f"read {service.hits}"})
    other_service.answer({"hits": 3})
    create(acme_api, live_route(*connectors(service, other_service)))
    user, session = ids()
    answer = prewarm(acme_api, session, user)
    assert [line["status"] for line in answer["sources"]] == ["prewarmed"]
    assert (service.hits, other_service.hits) == (1, 0)  # {query} is not known yet

    report = resolve(acme_api, user=user, session=session)
    source = live_source(report)
    assert source.get("prewarmed") is True
    notes = source["notes"]["connectors"]
    assert notes["balance"]["prewarmed"] is True and "prewarmed" not in notes["search"]
    assert (service.hits, other_service.hits) == (1, 1)
    assert "[balance] read 1" in report["request"]["messages"][0]["content"]

    other_user, _ = ids()  # another user of the same session: nothing pre-warmed for them
    resolve(acme_api, user=other_user, session=session)
    assert service.hits == 2


def test_a_pre_warmed_answer_older_than_its_ttl_is_read_again(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    service.responder = lambda seen: json_reply({"value": f"read {service.hits}"})
    other_service.answer({})
    create(acme_api, live_route(*connectors(service, other_service, ttl=1)))
    user, session = ids()
    prewarm(acme_api, session, user)
    time.sleep(1.2)  # the balance may be one second old, no more
    report = resolve(acme_api, user=user, session=session)
    assert "prewarmed" not in live_source(report)["notes"]["connectors"]["balance"]
    assert "[balance] read 2" in report["request"]["messages"][0]["content"]


def test_a_source_with_nothing_to_read_ahead_is_skipped(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    live = connectors(service, other_service, ttl=0)
    create(acme_api, live_route(*live))
    user, session = ids()
    [line] = prewarm(acme_api, session, user)["sources"]
    assert line["status"] == "skipped" and "needs {query} or caches nothing" in line["reason"]
    assert service.hits == other_service.hits == 0
