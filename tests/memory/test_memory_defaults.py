"""The memory source's defaults are its embedder's (issue 13): a route that writes no threshold
recalls on the local model's measured ones, a written value (the match block's, then the store's
``default_*``) wins, and the resolve report, the replay record and the preview say which applied
and where it came from. Real PostgreSQL, the real local embedder, through the HTTP API."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from sources.embedding import LOCAL_DEFAULTS, LOCAL_IDENTITY, get_embedder
from tests.conftest import ApiClient

DOG = "User's dog is called Biscuit"
QUESTION = "What's the name of my dog?"
OTHERS = (
    "User loves rainy Sundays",
    "User enjoys birdwatching",
    "User prefers tea in the afternoon",
)


def memory_route(name: str = "m", **source: Any) -> dict[str, Any]:
    settings = {"type": "memory", "name": "memories", **source}
    return {"name": name, "context": {"sources": [settings], "injection": {"mode": "tool_role"}}}


def remember(api: ApiClient, *contents: str, user: str = "u1") -> None:
    for content in contents:
        response = api.post(f"/api/v1/users/{user}/memories", {"content": content})
        assert response.status_code == 201, response.content


def resolve(api: ApiClient, route: str = "m") -> dict[str, Any]:
    response = api.post(
        "/api/v1/resolve",
        {
            "route": route,
            "user": "u1",
            "request": {"messages": [{"role": "user", "content": QUESTION}]},
        },
    )
    assert response.status_code == 200, response.content
    return dict(response.json())


def injected(report: dict[str, Any]) -> str:
    return " ".join(str(m.get("content")) for m in report["request"]["messages"])


def recall_notes(notes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in notes.items() if k.startswith(("min_similarity", "top_k", "embedder"))}


def test_the_question_is_about_half_as_close_as_the_old_default_asked() -> None:
    """The premise: with the local model the memory that answers the question is at ~0.5."""
    memory, question = get_embedder().embed([DOG, QUESTION])
    assert 0.4 < float(np.dot(memory, question)) < 0.62


def test_a_memory_at_half_similarity_is_recalled_on_the_defaults(acme_api: ApiClient) -> None:
    remember(acme_api, DOG, *OTHERS)
    acme_api.post("/api/v1/routes", memory_route())  # no match block: the defaults
    report = resolve(acme_api)
    source = report["sources"][0]
    assert source["notes"]["memory_status"] == "used", source
    assert "Biscuit" in injected(report)
    expected = {
        "min_similarity": LOCAL_DEFAULTS.memory_similarity_threshold,
        "min_similarity_from": "embedder",
        "top_k": LOCAL_DEFAULTS.memory_retrieval_limit,
        "top_k_from": "embedder",
        "embedder": LOCAL_IDENTITY,
        "embedder_defaults": LOCAL_DEFAULTS.origin,
    }
    assert recall_notes(source["notes"]) == expected

    record = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    (recorded,) = record["sources"]
    assert recall_notes(recorded["notes"]) == expected

    preview = acme_api.post(
        "/api/v1/plugins/context/preview", {"route": "m", "query": QUESTION, "user": "u1"}
    ).json()["sources"][0]
    assert recall_notes(preview["notes"]) == expected
    assert any(item["kept"] for item in preview["items"])

    # A block that writes only a judge-free recall with nothing in it is the same defaults.
    acme_api.post("/api/v1/routes", memory_route("m2", match={"recall": {"method": "embedding"}}))
    assert recall_notes(resolve(acme_api, "m2")["sources"][0]["notes"]) == expected


@pytest.mark.parametrize(
    ("source", "applied"),
    [
        # the match block's value wins over the store's and the embedder's
        (
            {
                "match": {"recall": {"min_similarity": 0.7}},
                "store": {"default_similarity_threshold": 0.1},
            },
            {"min_similarity": 0.7, "min_similarity_from": "route"},
        ),
        # the store's default wins over the embedder's
        (
            {"store": {"default_similarity_threshold": 0.7}},
            {"min_similarity": 0.7, "min_similarity_from": "store"},
        ),
    ],
)
def test_a_written_threshold_wins(
    acme_api: ApiClient, source: dict[str, Any], applied: dict[str, Any]
) -> None:
    remember(acme_api, DOG, *OTHERS)
    created = acme_api.post("/api/v1/routes", memory_route(**source))
    assert created.status_code == 201, created.content
    notes = resolve(acme_api)["sources"][0]["notes"]
    assert notes["memory_status"] == "missing"  # 0.7 recalls nothing with this model
    assert {k: notes[k] for k in applied} == applied
    assert notes["embedder_defaults"] == LOCAL_DEFAULTS.origin  # top_k still the embedder's


def test_the_stores_retrieval_limit_is_the_top_k(acme_api: ApiClient) -> None:
    remember(acme_api, DOG, *OTHERS)
    acme_api.post(
        "/api/v1/routes",
        memory_route(store={"default_retrieval_limit": 1, "default_similarity_threshold": -1}),
    )
    report = resolve(acme_api)
    notes = report["sources"][0]["notes"]
    assert (notes["top_k"], notes["top_k_from"]) == (1, "store")
    assert notes["memory_result_count"] == 1 and "Biscuit" in injected(report)
    assert "embedder_defaults" not in notes  # neither value came from the embedder


def test_the_store_defaults_are_validated(acme_api: ApiClient) -> None:
    refused = acme_api.post(
        "/api/v1/routes", memory_route(store={"default_similarity_threshold": 2})
    )
    assert refused.status_code == 400
    assert "default_similarity_threshold" in refused.json()["error"]["param"]
    refused = acme_api.post("/api/v1/routes", memory_route(store={"default_retrieval_limit": 0}))
    assert refused.status_code == 400


def test_the_route_writes_back_only_what_it_wrote(acme_api: ApiClient) -> None:
    written = {"match": {"recall": {"method": "embedding"}}}
    acme_api.post("/api/v1/routes", memory_route(**written))
    route = acme_api.get("/api/v1/routes/m").json()
    (own,) = route["context"]["sources"]
    assert own["match"] == written["match"]
    exported = yaml.safe_load(acme_api.get("/api/v1/routes/m/export").content)
    (source,) = exported["routes"][0]["plugins"][0]["configuration"]["sources"]
    assert source["match"] == written["match"]
    # the effective configuration says the values are left to the defaults, not what they are
    (effective,) = route["effective_context"]["sources"]
    recall = effective["match"]["recall"]
    assert recall["min_similarity"] is None and recall["top_k"] is None
