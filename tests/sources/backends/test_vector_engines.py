"""What the ``milvus`` and ``qdrant`` backends do alike (``sources/rag/vector_backends.py``), each
test run over both engines (Milvus Lite and Qdrant's local mode, in this process) through a
route's resolve: cosine scores, top_k and min_similarity, the filter applied by the engine before
top_k, the platform's own server with each tenant's collections apart, and a tenant's server
reached through the outbound guard without its secret in what the source reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.sources.backends.conftest import (
    DOCUMENTS,
    QUESTION,
    RECALL_ALL,
    backend_route,
    cosines,
    create,
    resolve_source,
    tenant_path,
)
from tests.sources.backends.engines import ENGINES, Engine


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> Engine:
    return ENGINES[request.param]


@pytest.fixture
def filled(engine: Engine, acme: TenantFixture, vector_root: Path) -> Engine:
    """acme's local file or directory of ``engine``, its collection ``docs`` filled."""
    engine.fill(tenant_path(vector_root, acme.schema, engine.local), "docs", DOCUMENTS)
    return engine


def test_a_route_recalls_from_a_local_collection_with_cosine_scores(
    acme_api: ApiClient, filled: Engine
) -> None:
    create(acme_api, filled.route())
    source = resolve_source(acme_api, "r")
    assert source["status"] == "ok", source
    expected = cosines(QUESTION, DOCUMENTS)
    assert filled.ids(source) == sorted(expected, key=expected.get, reverse=True)
    assert filled.ids(source)[0] == "warranty"
    for candidate in source["candidates"]:
        cosine = expected[filled.document(candidate["document_id"])]
        assert candidate["cosine"] == pytest.approx(cosine, abs=1e-4)
        assert candidate["title"]  # the metadata's title
    assert source["notes"]["backend"] == filled.name
    assert resolve_source(acme_api, "r")["status"] == "ok"  # the same client, reused


def test_top_k_and_min_similarity_are_honoured(acme_api: ApiClient, filled: Engine) -> None:
    expected = cosines(QUESTION, DOCUMENTS)
    ranked = sorted(expected, key=expected.get, reverse=True)
    create(acme_api, filled.route(source={"match": {"recall": {"top_k": 2, "min_similarity": -1}}}))
    assert filled.ids(resolve_source(acme_api, "r")) == ranked[:2]
    threshold = (expected[ranked[0]] + expected[ranked[1]]) / 2
    recall = {"recall": {"top_k": 10, "min_similarity": threshold}}
    create(acme_api, filled.route("strict", source={"match": recall}))
    assert filled.ids(resolve_source(acme_api, "strict")) == ranked[:1]


def test_the_filter_is_applied_by_the_engine_before_top_k(
    acme_api: ApiClient, filled: Engine
) -> None:
    """Two billing documents, both farther from the question than the warranty one: with top_k 2
    the engine's filtered search returns both (a filter applied after the top 2 would keep at
    most one)."""
    recall = {"recall": {"top_k": 2, "min_similarity": -1}}
    create(acme_api, filled.route(source={"match": recall, "filter": {"topic": "billing"}}))
    assert sorted(filled.ids(resolve_source(acme_api, "r"))) == ["invoice", "refund"]


def test_the_platforms_server_keeps_each_tenants_collections_apart(
    engine: Engine,
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    vector_root: Path,
    settings: Any,
) -> None:
    """The seed's own example (``{collection: docs, reuse_cache_connection: true}``) on the
    platform's server: acme's ``docs`` is ``acme__docs`` there, which globex cannot name."""
    platform = vector_root / f"platform-{engine.local}"  # the platform's, in local mode here
    platform.parent.mkdir(parents=True, exist_ok=True)
    setattr(settings, engine.platform_setting, str(platform))
    engine.fill(platform, f"{acme.schema}__docs", DOCUMENTS)
    seed = {"collection": "docs", "reuse_cache_connection": True, "metadata_field": "metadata"}
    route = backend_route("seed", engine.name, seed, match=RECALL_ALL)
    create(acme_api, route)
    assert engine.ids(resolve_source(acme_api, "seed"))[0] == "warranty"
    create(globex_api, route)
    other = resolve_source(globex_api, "seed")
    assert other["status"] == "failed" and f"'{globex.schema}__docs'" in other["error"]

    setattr(settings, engine.platform_setting, "")
    unset = resolve_source(acme_api, "seed")
    assert unset["status"] == "failed" and engine.platform_setting in unset["error"]


def test_a_server_url_goes_through_the_outbound_guard(
    engine: Engine, acme_api: ApiClient, vector_root: Path
) -> None:
    config = {engine.address_field: engine.server, engine.secret_field: engine.secret}
    create(acme_api, engine.route(**config))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "failed"
    assert "refused" in source["error"] and "allow-list" in source["error"]
    assert engine.secret not in json.dumps(source)
