"""Helpers for knowledge-base tests: collections filled through the API with the real local embedder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Service, outbound_allowlist, running_service


def make_collection(api: ApiClient, name: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
    created = api.post("/api/v1/collections", {"name": name})
    assert created.status_code == 201, created.content
    response = api.post(f"/api/v1/collections/{name}/documents", {"documents": documents})
    assert response.status_code == 202, response.content
    job = api.get(f"/api/v1/jobs/{response.json()['job']}").json()
    assert job["status"] == "done", job
    return job


def rag_route(name: str, collection: str, **source: Any) -> dict[str, Any]:
    return {
        "name": name,
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "docs",
                    "backend": "vectorstore",
                    "backend_config": {"collection": collection},
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def resolve(api: ApiClient, route: str, question: str) -> dict[str, Any]:
    response = api.post(
        "/api/v1/resolve",
        {"route": route, "request": {"messages": [{"role": "user", "content": question}]}},
    )
    assert response.status_code == 200, response.content
    return response.json()


SUPPORT_DOCS = [
    {
        "id": "refund",
        "title": "Refund policy",
        "text": "Customers may return products within 30 days of delivery for a full refund to the original payment method.",
        "metadata": {"topic": "billing"},
    },
    {
        "id": "warranty",
        "title": "Headphone warranty",
        "text": "Headphones carry a two-year warranty covering defects such as crackling sound or a dead ear cup.",
        "metadata": {"topic": "warranty"},
    },
    {
        "id": "shipping",
        "title": "Shipping",
        "text": "Standard shipping inside the EU takes three to five business days; express arrives the next day.",
        "metadata": {"topic": "shipping"},
    },
]


@pytest.fixture
def support_docs() -> list[dict[str, Any]]:
    return [dict(doc) for doc in SUPPORT_DOCS]


@pytest.fixture
def service() -> Iterator[Service]:
    """A search service on loopback; each test sets what it answers (``tests/loopback.py``)."""
    with running_service() as running:
        yield running


@pytest.fixture
def allow_acme(acme: TenantFixture) -> Iterator[None]:
    """acme's outbound allow-list names loopback, where the test services run."""
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        yield
