"""RAG retrieval through real routes: recall methods, filters, isolation, the judge and the cache."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.db import connection, transaction
from django_tenants.utils import schema_context

from sources.embedding import get_embedder
from sources.lexical import lexical_index
from sources.models import Collection
from sources.recall import nearest_chunks, rows_by_id, rows_with_cosines
from tests.conftest import ApiClient, table_locked
from tests.sources.knowledge.conftest import make_collection, rag_route, resolve
from tests.unchecked_routes import save_unchecked


def kept_ids(report: dict[str, Any]) -> list[str]:
    source = report["sources"][0]
    return [c["document_id"] for c in source.get("candidates", []) if c["kept"]]


@pytest.mark.parametrize(
    "recall",
    [
        {"method": "embedding", "top_k": 3, "min_similarity": 0.2},
        {"method": "bm25", "top_k": 3},
        {"method": "hybrid", "top_k": 3, "min_similarity": 0.0, "hybrid_mode": "weighted"},
        {"method": "hybrid", "top_k": 3, "min_similarity": 0.0, "hybrid_mode": "rrf"},
    ],
)
def test_each_recall_method_finds_the_answer_first(
    acme_api: ApiClient, support_docs: list, recall: dict
) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post("/api/v1/routes", rag_route("r", "kb", match={"recall": recall}))
    report = resolve(
        acme_api, "r", "my headphones make a crackling sound, is that covered by the warranty?"
    )
    candidates = report["sources"][0]["candidates"]
    assert candidates[0]["document_id"] == "warranty"
    assert all(
        c["reason"] == "recalled" for c in candidates
    )  # a recall-only block keeps the recall order
    if recall["method"] == "bm25":
        assert candidates[0]["cosine"] is None and candidates[0]["bm25"] > 0
    else:
        assert candidates[0]["cosine"] > 0.3
    system = report["request"]["messages"][0]["content"]
    assert "[Document: Headphone warranty]" in system


def test_default_match_judges_and_keeps_the_relevant(
    acme_api: ApiClient, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post("/api/v1/routes", rag_route("r", "kb"))
    # The local judge is calibrated on Cranfield: 0.5 means "more likely relevant than not", which
    # for MiniLM takes a close match (cosine about 0.7 or more with the best BM25 of the set).
    report = resolve(acme_api, "r", "what is the refund policy for returned products?")
    candidates = report["sources"][0]["candidates"]
    assert kept_ids(report)[0] == "refund"
    assert all(c["judge_score"] is not None for c in candidates)
    assert all((c["judge_score"] >= 0.5) == c["kept"] for c in candidates)
    item = report["items"][0]
    assert item["source"] == "docs" and item["priority"] == 30 and item["kept"]


def test_min_similarity_drops_unrelated_documents(acme_api: ApiClient, support_docs: list) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post(
        "/api/v1/routes",
        rag_route("r", "kb", match={"recall": {"top_k": 5, "min_similarity": 0.99}}),
    )
    report = resolve(acme_api, "r", "tell me about quantum chromodynamics")
    assert report["sources"][0]["status"] == "empty"


def test_max_context_length_caps_characters(acme_api: ApiClient, support_docs: list) -> None:
    make_collection(acme_api, "kb", support_docs)
    route = rag_route(
        "r", "kb", match={"recall": {"top_k": 3, "min_similarity": -1}}, max_context_length=150
    )
    acme_api.post("/api/v1/routes", route)
    candidates = resolve(acme_api, "r", "warranty refund shipping")["sources"][0]["candidates"]
    assert [c["kept"] for c in candidates].count(True) == 1
    assert {c["reason"] for c in candidates if not c["kept"]} == {"max_context_length"}


def test_metadata_filter_returns_only_matching_documents(
    acme_api: ApiClient, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    route = rag_route(
        "r",
        "kb",
        match={"recall": {"top_k": 3, "min_similarity": -1}},
        filter={"topic": "shipping"},
    )
    acme_api.post("/api/v1/routes", route)
    assert kept_ids(resolve(acme_api, "r", "refund for broken headphones")) == ["shipping"]


def test_filtered_top_k_returns_k_rows_through_the_hnsw_index(
    acme_api: ApiClient, acme: Any
) -> None:
    documents = [
        {
            "id": f"d{i}",
            "text": f"Maintenance note {i} about pump {i} and valve {i * 7}.",
            "metadata": {"team": "rare" if i % 10 == 0 else "common"},
        }
        for i in range(200)
    ]
    make_collection(acme_api, "notes", documents)
    vector = get_embedder().embed_query("valve maintenance")
    with schema_context(acme.schema):
        ids = [Collection.objects.get(name="notes").pk]
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SET LOCAL enable_seqscan = off"
                )  # make the planner use the HNSW index
                cursor.execute("SET LOCAL enable_bitmapscan = off")
                cursor.execute("SET LOCAL enable_sort = off")
            rows = nearest_chunks(ids, vector, 5, {"team": "rare"})
            from pgvector.django import CosineDistance

            from sources.models import Chunk

            plan = (
                Chunk.objects.filter(collection_id__in=ids, metadata__contains={"team": "rare"})
                .annotate(d=CosineDistance("embedding", vector))
                .order_by("d")[:5]
                .explain()
            )
    assert "chunk_embedding_hnsw" in plan
    assert len(rows) == 5  # 20 of 200 rows match: an index scan without iterative scans finds fewer
    assert all(row["metadata"]["team"] == "rare" for row, _ in rows)
    assert [c for _, c in rows] == sorted((c for _, c in rows), reverse=True)


def test_bm25_only_candidates_get_their_rows_and_cosines_in_one_read(
    acme_api: ApiClient, acme: Any, support_docs: list
) -> None:
    """Hybrid recall reads the chunks BM25 found beyond the embedding's pool once: the same rows as
    ``rows_by_id`` and the cosine the HNSW scan reports; it reuses the query's BM25 scores."""
    make_collection(acme_api, "kb", support_docs)
    query = "express shipping inside the EU"
    vector = get_embedder().embed_query(query)
    with schema_context(acme.schema):
        collection = Collection.objects.get(name="kb")
        dense = nearest_chunks([collection.pk], vector, 10, None)
        ids = [row["id"] for row, _ in dense]
        rows, cosines = rows_with_cosines(ids, vector)
        embeddings = {chunk_id: row.pop("embedding") for chunk_id, row in rows.items()}
        assert rows == rows_by_id(ids)
        for chunk_id, embedding in embeddings.items():  # kept for the judge's feedback
            assert float(np.dot(embedding, vector)) == pytest.approx(cosines[chunk_id], abs=1e-5)
        for row, cosine in dense:
            assert cosines[row["id"]] == pytest.approx(cosine, abs=1e-5)
        assert rows_with_cosines([], vector) == ({}, {})
        lexical = lexical_index(acme.schema, [collection])
    scores = lexical.scores(query)
    assert lexical.top(query, 3, scores=scores) == lexical.top(query, 3)
    assert lexical.top(query, 3, {"topic": "billing"}, scores=scores) == lexical.top(
        query, 3, {"topic": "billing"}
    )


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
def test_recalled_hits_carry_their_stored_vectors(
    acme_api: ApiClient, acme: Any, support_docs: list, method: str
) -> None:
    """Embedding and hybrid recall give each hit its chunk's stored unit vector (the local judge's
    relevance feedback reads it): its dot product with the query is the hit's cosine."""
    from sources.recall import recall

    make_collection(acme_api, "kb", support_docs)
    query = "express shipping inside the EU"
    vector = get_embedder().embed_query(query)
    with schema_context(acme.schema):
        collection = Collection.objects.get(name="kb")
        hits = recall(
            schema=acme.schema,
            collections=[collection],
            query=query,
            method=method,  # type: ignore[arg-type]
            top_k=5,
            min_similarity=-1.0,
            query_vector=vector,
            hybrid_mode="rrf",
        )
    assert hits
    for hit in hits:
        assert hit.vector is not None and hit.vector.shape == (len(vector),)
        assert float(np.dot(hit.vector, vector)) == pytest.approx(hit.cosine, abs=1e-5)


def test_search_never_crosses_tenants(
    acme_api: ApiClient, globex_api: ApiClient, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    make_collection(
        globex_api,
        "kb",
        [
            {
                "id": "globex-secret",
                "title": "Globex warranty",
                "text": "Globex headphones crackling warranty lasts ten years.",
            }
        ],
    )
    for api in (acme_api, globex_api):
        api.post(
            "/api/v1/routes",
            rag_route(
                "r", "kb", match={"recall": {"top_k": 5, "min_similarity": -1}}, cache_results=True
            ),
        )
    question = "headphones crackling warranty"
    acme_report = resolve(acme_api, "r", question)
    globex_report = resolve(
        globex_api, "r", question
    )  # same route, source, query: must not hit acme's cache
    assert "globex-secret" not in kept_ids(acme_report)
    assert kept_ids(globex_report) == ["globex-secret"]
    assert globex_report["sources"][0]["notes"]["cache"] == "miss"
    preview = acme_api.post(
        "/api/v1/plugins/context/preview", {"route": "r", "query": question}
    ).json()
    assert "globex-secret" not in [i["document_id"] for i in preview["sources"][0]["items"]]


def test_cache_serves_repeats_and_a_document_change_invalidates(
    acme_api: ApiClient, support_docs: list
) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post(
        "/api/v1/routes",
        rag_route(
            "r",
            "kb",
            match={"recall": {"top_k": 3, "min_similarity": 0.1}},
            cache_results=True,
            cache_ttl_seconds=600,
        ),
    )
    question = "how many days do I have to return a product for a refund?"
    first = resolve(acme_api, "r", question)
    second = resolve(acme_api, "r", question)
    assert first["sources"][0]["notes"]["cache"] == "miss"
    assert second["sources"][0]["notes"]["cache"] == "hit"
    assert second["request"] == {**first["request"]}
    changed = {
        "id": "refund",
        "title": "Refund policy",
        "text": "Returns for a refund are accepted within 90 days.",
    }
    acme_api.post("/api/v1/collections/kb/documents", {"documents": [changed]})
    third = resolve(acme_api, "r", question)
    assert third["sources"][0]["notes"]["cache"] == "miss"
    assert "90 days" in third["request"]["messages"][0]["content"]


def test_unknown_collection_fails_the_source_by_its_on_failure(
    acme_api: ApiClient, acme: Any
) -> None:
    save_unchecked(acme.schema, rag_route("skip", "missing"))
    report = resolve(acme_api, "skip", "anything")
    assert report["sources"][0]["status"] == "failed"
    assert "unknown collection" in report["sources"][0]["error"]
    save_unchecked(acme.schema, rag_route("block", "missing", on_failure="block"))
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "block", "request": {"messages": [{"role": "user", "content": "x"}]}},
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "source_failed"


def test_a_locked_collection_table_stops_the_source_at_its_deadline(
    acme_api: ApiClient, acme: Any
) -> None:
    """The collection lookup runs under the source's statement deadline: a lock cannot hold the
    request past the source's timeout."""
    save_unchecked(acme.schema, rag_route("locked", "kb", timeout_ms=300))
    with table_locked(acme.schema, "sources_collection", give_up_s=10) as gave_up:
        report = resolve(acme_api, "locked", "anything")
        assert not gave_up.is_set()  # answered while the table was still locked
    assert report["sources"][0]["status"] in {"failed", "timeout"}


def test_rag_settings_are_validated(acme_api: ApiClient) -> None:
    cases = [
        (rag_route("r", "kb", match={}), "match needs a recall block"),
        (rag_route("r", "kb", match={"recall": {"method": "dense"}}), "method"),
        (rag_route("r", "kb", match={"judge": {"min_score": 2}}), "min_score"),
        (
            {
                **rag_route("r", "kb"),
                "context": {
                    "sources": [{"type": "rag", "backend": "vectorstore", "backend_config": {}}]
                },
            },
            "collection",
        ),
    ]
    for route, fragment in cases:
        response = acme_api.post("/api/v1/routes", route)
        assert response.status_code == 400, route
        assert fragment in response.json()["error"]["message"], response.json()


def test_preview_shows_recall_and_judge_scores(acme_api: ApiClient, support_docs: list) -> None:
    make_collection(acme_api, "kb", support_docs)
    acme_api.post("/api/v1/routes", rag_route("r", "kb"))
    query = "what is the refund policy for returned products?"
    response = acme_api.post("/api/v1/plugins/context/preview", {"route": "r", "query": query})
    assert response.status_code == 200, response.content
    source = response.json()["sources"][0]
    assert source["name"] == "docs" and source["status"] == "ok"
    first = source["items"][0]
    assert first["document_id"] == "refund" and first["kept"] is True
    assert first["recall_score"] > 0 and 0 <= first["judge_score"] <= 1
    assert "text" not in first
    missing = acme_api.post("/api/v1/plugins/context/preview", {"route": "nope", "query": "x"})
    assert missing.status_code == 404
