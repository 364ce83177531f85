"""A collection's judge calibration: measured on its own chunks at ingestion, used by the local
judge of a rag source on the default match block, shown in the report and the preview (real
PostgreSQL, the local embedder, the route API)."""

from __future__ import annotations

from typing import Any

import pytest
from django_tenants.utils import schema_context

from contextplatform.demo.defaults import DEMO_DOCUMENTS, DEMO_SAMPLE_QUESTIONS
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


# --- one calibration for a burst of jobs ----------------------------------------------------------


def submitted(collection: Collection, *documents: dict[str, str]) -> str:
    from sources.ingestion import DocumentInput, submit_documents

    inputs = [
        DocumentInput(id=d["id"], title=d.get("title", ""), text=d["text"]) for d in documents
    ]
    return submit_documents(collection=collection, documents=inputs).pk


def test_a_job_leaves_the_calibration_to_the_job_queued_after_it(acme: TenantFixture) -> None:
    from sources import calibration
    from sources.embedding import get_embedder
    from sources.ingestion import create_collection, run_ingestion_job

    embedder = get_embedder()
    measured: list[int] = []
    real_refresh = calibration.refresh

    def counted(collection_id: int, used: Any) -> None:
        measured.append(collection_id)
        real_refresh(collection_id, used)

    with schema_context(acme.schema):
        collection = create_collection(name="burst")
        first = submitted(collection, *[dict(d) for d in DEMO_DOCUMENTS[:3]])
        second = submitted(collection, *[dict(d) for d in DEMO_DOCUMENTS[3:]])
        calibration.refresh = counted  # type: ignore[assignment]
        try:
            assert run_ingestion_job(first, embedder).status == "done"
            collection.refresh_from_db()
            assert measured == [] and collection.judge_calibration is None  # the second will
            assert run_ingestion_job(second, embedder).status == "done"
        finally:
            calibration.refresh = real_refresh  # type: ignore[assignment]
        collection.refresh_from_db()
    assert measured == [collection.pk]
    stored = collection.judge_calibration
    assert stored["origin"] == f"collection burst v{collection.version}"
    assert stored["documents"] == len(DEMO_DOCUMENTS)  # both jobs' documents


def test_a_calibration_overtaken_by_a_newer_version_measures_again(acme: TenantFixture) -> None:
    """Another job ended (and left the calibration to this one) while this one measured."""
    from sources import calibration
    from sources.embedding import get_embedder
    from sources.ingestion import create_collection, run_ingestion_job

    embedder = get_embedder()
    real_refresh = calibration.refresh
    rounds: list[int] = []

    with schema_context(acme.schema):
        collection = create_collection(name="overtaken")
        first = submitted(collection, *[dict(d) for d in DEMO_DOCUMENTS[:3]])

        def overtaken(collection_id: int, used: Any) -> None:
            real_refresh(collection_id, used)
            rounds.append(Collection.objects.get(pk=collection_id).version)
            if len(rounds) == 1:  # meanwhile another worker's job stores its documents
                other = submitted(collection, *[dict(d) for d in DEMO_DOCUMENTS[3:]])
                calibration.refresh = real_refresh  # type: ignore[assignment]
                assert run_ingestion_job(other, embedder).status == "done"
                calibration.refresh = overtaken  # type: ignore[assignment]

        calibration.refresh = overtaken  # type: ignore[assignment]
        try:
            assert run_ingestion_job(first, embedder).status == "done"
        finally:
            calibration.refresh = real_refresh  # type: ignore[assignment]
        collection.refresh_from_db()
    assert len(rounds) == 2 and rounds[1] > rounds[0]
    assert collection.judge_calibration["origin"] == f"collection overtaken v{collection.version}"
    assert collection.judge_calibration["documents"] == len(DEMO_DOCUMENTS)
