"""A collection's judge calibration: measured on its own chunks at ingestion, used by the local
judge of a rag source on the default match block, shown in the report and the preview (real
PostgreSQL, the local embedder, the route API)."""

from __future__ import annotations

from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.routing.demo import DEMO_DOCUMENTS, DEMO_SAMPLE_QUESTIONS
from sources.judge_calibration import PRIOR
from sources.models import Collection
from tests.conftest import ApiClient, TenantFixture
from tests.sources.knowledge.conftest import make_collection, rag_route, resolve


def kept(report: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in report["sources"][0]["candidates"] if c["kept"]]


def test_ingestion_calibrates_and_the_default_block_keeps_each_answer(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    make_collection(acme_api, "support-kb", [dict(d) for d in DEMO_DOCUMENTS])
    with schema_context(acme.schema):
        collection = Collection.objects.get(name="support-kb")
        assert collection.judge_calibration is not None and collection.judge_calibrated_at
        stored = collection.judge_calibration
    assert stored["origin"] == f"collection support-kb v{collection.version}"
    assert stored["documents"] == len(DEMO_DOCUMENTS) and stored["pseudo_queries"] >= 10
    assert stored["combined"]["match_mean"] > stored["combined"]["background_mean"]

    acme_api.post("/api/v1/routes", rag_route("r", "support-kb"))  # no match block: the defaults
    for question, article in DEMO_SAMPLE_QUESTIONS.items():
        report = resolve(acme_api, "r", question)
        source = report["sources"][0]
        assert article in kept(report), (question, source["candidates"])
        (used,) = source["notes"]["judge_calibration"]
        assert used["from"] == stored["origin"]
        for candidate in source["candidates"]:
            assert (candidate["judge_score"] >= 0.5) == candidate["kept"] or (
                candidate["reason"] == "beyond_top_k"
            )
            expected = 0.8 * candidate["cosine"] + 0.2 * candidate["bm25_normalised"]
            assert candidate["judge_signal"] == pytest.approx(expected, abs=1e-5)

    preview = acme_api.post(
        "/api/v1/plugins/context/preview", {"route": "r", "query": "Do you ship to Norway?"}
    ).json()["sources"][0]
    first = preview["items"][0]
    assert first["document_id"] == "shipping" and first["kept"]
    assert {"cosine", "bm25_normalised", "judge_signal", "judge_score"} <= set(first)
    assert preview["notes"]["judge_calibration"][0]["from"] == stored["origin"]


def test_a_document_change_recalibrates_and_one_document_falls_back_to_the_prior(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    make_collection(acme_api, "one", [dict(DEMO_DOCUMENTS[0])])
    with schema_context(acme.schema):
        assert Collection.objects.get(name="one").judge_calibration is None
    acme_api.post("/api/v1/routes", rag_route("r", "one"))
    report = resolve(acme_api, "r", "How many days do I have to return an item?")
    assert report["sources"][0]["notes"]["judge_calibration"][0]["from"] == PRIOR.origin

    response = acme_api.post(
        "/api/v1/collections/one/documents", {"documents": [dict(d) for d in DEMO_DOCUMENTS[1:3]]}
    )
    assert response.status_code == 202
    with schema_context(acme.schema):
        collection = Collection.objects.get(name="one")
    assert collection.judge_calibration["origin"] == f"collection one v{collection.version}"
    report = resolve(acme_api, "r", "How many days do I have to return an item?")
    assert report["sources"][0]["notes"]["judge_calibration"][0]["from"].startswith(
        "collection one v"
    )
