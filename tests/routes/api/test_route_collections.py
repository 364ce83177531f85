"""A route's ``vectorstore`` source names collections of the tenant: one that does not exist is
refused when the route is saved (every resolve would fail that source), with the field named;
through the CRUD API and the import alike. Another vector database's collection is its own."""

from __future__ import annotations

from typing import Any

from tests.conftest import ApiClient


def rag(name: str, config: dict[str, Any], backend: str = "vectorstore") -> dict[str, Any]:
    return {"type": "rag", "name": name, "backend": backend, "backend_config": config}


def route(*sources: dict[str, Any], name: str = "support") -> dict[str, Any]:
    return {"name": name, "context": {"sources": list(sources)}}


def refused(response: Any, param: str, collection: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["param"] == param
    assert f"no collection named {collection!r}" in error["message"]


def test_a_route_naming_a_missing_collection_is_refused(acme_api: ApiClient) -> None:
    refused(
        acme_api.post("/api/v1/routes", route(rag("docs", {"collection": "kb"}))),
        "context.sources[0].backend_config.collection",
        "kb",
    )
    assert acme_api.get("/api/v1/routes/support").status_code == 404

    assert acme_api.post("/api/v1/collections", {"name": "kb"}).status_code == 201
    several = route(rag("docs", {"collection": "kb"}), rag("more", {"collections": ["kb", "faq"]}))
    refused(
        acme_api.post("/api/v1/routes", several),
        "context.sources[1].backend_config.collections[1]",
        "faq",
    )
    hybrid = rag(
        "both",
        {
            "primary": {"backend": "vectorstore", "backend_config": {"collection": "kb"}},
            "fallback": {"backend": "vectorstore", "backend_config": {"collection": "old"}},
        },
        backend="hybrid",
    )
    refused(
        acme_api.post("/api/v1/routes", route(hybrid)),
        "context.sources[0].backend_config.fallback.backend_config.collection",
        "old",
    )

    saved = acme_api.post("/api/v1/routes", route(rag("docs", {"collection": "kb"})))
    assert saved.status_code == 201, saved.content
    # A change that names a missing one is refused too, and the route stays as it was.
    changed = acme_api.put("/api/v1/routes/support", route(rag("docs", {"collection": "gone"})))
    refused(changed, "context.sources[0].backend_config.collection", "gone")
    kept = acme_api.get("/api/v1/routes/support").json()["context"]["sources"][0]
    assert kept["backend_config"] == {"collection": "kb"}


def test_another_tenants_collection_does_not_count(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    assert globex_api.post("/api/v1/collections", {"name": "kb"}).status_code == 201
    refused(
        acme_api.post("/api/v1/routes", route(rag("docs", {"collection": "kb"}))),
        "context.sources[0].backend_config.collection",
        "kb",
    )


def test_an_external_databases_collection_is_not_checked(acme_api: ApiClient) -> None:
    qdrant = rag(
        "vectors", {"collection": "faq", "url": "https://qdrant.example.com"}, backend="qdrant"
    )
    response = acme_api.post("/api/v1/routes", route(qdrant))
    assert response.status_code == 201, response.content


def test_an_import_naming_a_missing_collection_saves_nothing(acme_api: ApiClient) -> None:
    document = {
        "routes": [
            {
                "name": "support",
                "plugins": [
                    {
                        "type": "context",
                        "configuration": {"sources": [rag("docs", {"collection": "kb"})]},
                    }
                ],
            }
        ]
    }
    response = acme_api.post("/api/v1/routes/import", document)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert "no collection named 'kb'" in error["message"]
    assert error["param"].endswith("sources[0].backend_config.collection")
    assert acme_api.get("/api/v1/routes/support").status_code == 404


def test_sources_inherited_from_a_recipe_name_the_recipe(acme_api: ApiClient) -> None:
    document = {
        "recipes": [
            {
                "name": "kb-recipe",
                "plugins": [
                    {
                        "type": "context",
                        "configuration": {"sources": [rag("docs", {"collection": "kb"})]},
                    }
                ],
                "decisions": [{"name": "support", "plugins": []}],
            }
        ]
    }
    response = acme_api.post("/api/v1/routes/import", document)
    assert response.status_code == 400, response.content
    message = response.json()["error"]["message"]
    assert "inherited from recipe 'kb-recipe'" in message
    assert "no collection 'kb'" in message
    assert acme_api.get("/api/v1/routes/support").status_code == 404
