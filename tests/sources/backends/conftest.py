"""Helpers for the vector-database backends: each tenant's local vector files in a temporary
directory, collections filled with the platform's own embedder, and routes over them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sources.embedding import get_embedder
from tests.conftest import ApiClient

# Texts about three topics; the filter tests pick one topic while another is closer to the query.
DOCUMENTS = [
    {
        "id": "refund",
        "title": "Refund policy",
        "text": "Customers may return products within 30 days of delivery for a full refund.",
        "metadata": {"topic": "billing", "title": "Refund policy"},
    },
    {
        "id": "invoice",
        "title": "Invoices",
        "text": "Invoices are emailed each month and can be downloaded from the billing page.",
        "metadata": {"topic": "billing", "title": "Invoices"},
    },
    {
        "id": "warranty",
        "title": "Headphone warranty",
        "text": "Headphones carry a two-year warranty covering crackling sound or a dead ear cup.",
        "metadata": {"topic": "warranty", "title": "Headphone warranty"},
    },
    {
        "id": "shipping",
        "title": "Shipping",
        "text": "Standard shipping inside the EU takes three to five business days.",
        "metadata": {"topic": "shipping", "title": "Shipping"},
    },
]
QUESTION = "my headphones crackle, is that covered by the warranty?"
RECALL_ALL = {"recall": {"top_k": 10, "min_similarity": -1}}


@pytest.fixture
def vector_root(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """Each tenant's Milvus Lite files and Qdrant directories under a temporary root; every
    client the backends opened is closed after the test (a file stays open in its process)."""
    from sources.rag import milvus, qdrant

    settings.VECTOR_LOCAL_ROOT = tmp_path / "vector"
    yield settings.VECTOR_LOCAL_ROOT
    milvus.forget_connections()
    qdrant.forget_connections()


def tenant_path(root: Path, schema: str, name: str) -> Path:
    directory = root / schema
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


def embedded(documents: list[dict[str, Any]]) -> list[list[float]]:
    return get_embedder().embed([doc["text"] for doc in documents])


def cosines(question: str, documents: list[dict[str, Any]]) -> dict[str, float]:
    """Each document's cosine to ``question`` under the platform's embedder (unit vectors)."""
    query = get_embedder().embed_query(question)
    return {
        doc["id"]: sum(a * b for a, b in zip(query, vector, strict=True))
        for doc, vector in zip(documents, embedded(documents), strict=True)
    }


def backend_route(name: str, backend: str, config: dict[str, Any], **source: Any) -> dict[str, Any]:
    source.setdefault("timeout_ms", 20_000)
    return {
        "name": name,
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "kb",
                    "backend": backend,
                    "backend_config": config,
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def create(api: ApiClient, route: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content
    return response.json()


def resolve_source(api: ApiClient, route: str, question: str = QUESTION) -> dict[str, Any]:
    response = api.post(
        "/api/v1/resolve",
        {"route": route, "request": {"messages": [{"role": "user", "content": question}]}},
    )
    assert response.status_code == 200, response.content
    return response.json()["sources"][0]


def kept(source: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in source.get("candidates", []) if c["kept"]]
