"""The ``qdrant`` backend against qdrant-client's embedded **local mode** (``QdrantClient(path=...)``:
Qdrant's search run inside this process on a directory, not a Qdrant server), through a route's
resolve: collections filled with the platform's embedder, cosine scores, top_k and
min_similarity, the filter passed down as Qdrant conditions, a directory another process holds,
the platform's Qdrant with each tenant's collections apart, and the configuration refused where it
would name the platform's disk."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sources.embedding import get_embedder
from tests.conftest import ApiClient, TenantFixture
from tests.sources.backends.conftest import (
    DOCUMENTS,
    QUESTION,
    RECALL_ALL,
    backend_route,
    cosines,
    create,
    embedded,
    kept,
    resolve_source,
    tenant_path,
)

# Point ids are integers or UUIDs in Qdrant: the document's id lives in the payload too.
IDS = {doc["id"]: str(uuid.uuid5(uuid.NAMESPACE_URL, doc["id"])) for doc in DOCUMENTS}
NAMES = {point: name for name, point in IDS.items()}

HOLD = textwrap.dedent(
    """
    import sys
    from qdrant_client import QdrantClient

    client = QdrantClient(path=sys.argv[1])
    print("holding", flush=True)
    sys.stdin.read()
    client.close()
    """
)


def fill(
    path: Path,
    collection: str,
    documents: list[dict[str, Any]],
    *,
    size: int | None = None,
    metadata: bool = True,
) -> None:
    """Fill a local-mode collection with another client, closed afterwards (the local mode lets
    one client at a time hold a directory)."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    dimensions = size or get_embedder().dimensions
    client.create_collection(
        collection,
        vectors_config=models.VectorParams(size=dimensions, distance=models.Distance.COSINE),
    )
    vectors = embedded(documents) if size is None else [[1.0] * size for _ in documents]
    client.upsert(
        collection,
        points=[
            models.PointStruct(
                id=IDS[doc["id"]],
                vector=vector,
                payload={
                    "content": doc["text"],
                    **({"metadata": doc["metadata"]} if metadata else doc["metadata"]),
                },
            )
            for doc, vector in zip(documents, vectors, strict=True)
        ],
    )
    client.close()


def qdrant_route(name: str = "r", **config: Any) -> dict[str, Any]:
    source = config.pop("source", {})
    return backend_route(
        name,
        "qdrant",
        {"collection": "docs", "url": "kb", "metadata_field": "metadata", **config},
        **{"match": RECALL_ALL, **source},
    )


def names(source: dict[str, Any]) -> list[str]:
    return [NAMES[point] for point in kept(source)]


@pytest.fixture
def local_directory(acme: TenantFixture, vector_root: Path) -> Path:
    path = tenant_path(vector_root, acme.schema, "kb")
    fill(path, "docs", DOCUMENTS)
    return path


def test_a_route_recalls_from_a_local_mode_collection_with_cosine_scores(
    acme_api: ApiClient, local_directory: Path
) -> None:
    create(acme_api, qdrant_route())
    source = resolve_source(acme_api, "r")
    assert source["status"] == "ok", source
    expected = cosines(QUESTION, DOCUMENTS)
    assert names(source) == sorted(expected, key=expected.get, reverse=True)
    for candidate in source["candidates"]:
        cosine = expected[NAMES[candidate["document_id"]]]
        assert candidate["cosine"] == pytest.approx(cosine, abs=1e-4)
        assert candidate["title"]
    assert source["notes"]["backend"] == "qdrant"
    assert resolve_source(acme_api, "r")["status"] == "ok"  # the same client, reused


def test_top_k_and_min_similarity_are_honoured(acme_api: ApiClient, local_directory: Path) -> None:
    expected = cosines(QUESTION, DOCUMENTS)
    ranked = sorted(expected, key=expected.get, reverse=True)
    create(acme_api, qdrant_route(source={"match": {"recall": {"top_k": 2, "min_similarity": -1}}}))
    assert names(resolve_source(acme_api, "r")) == ranked[:2]
    threshold = (expected[ranked[0]] + expected[ranked[1]]) / 2
    recall = {"recall": {"top_k": 10, "min_similarity": threshold}}
    create(acme_api, qdrant_route("strict", source={"match": recall}))
    assert names(resolve_source(acme_api, "strict")) == ranked[:1]


def test_the_filter_is_applied_by_qdrant_before_top_k(
    acme: TenantFixture, acme_api: ApiClient, local_directory: Path, vector_root: Path
) -> None:
    recall = {"recall": {"top_k": 2, "min_similarity": -1}}
    create(acme_api, qdrant_route(source={"match": recall, "filter": {"topic": "billing"}}))
    assert sorted(names(resolve_source(acme_api, "r"))) == ["invoice", "refund"]

    flat = tenant_path(vector_root, acme.schema, "flat")
    fill(flat, "docs", DOCUMENTS, metadata=False)  # metadata keys at the payload's top level
    route = qdrant_route(
        "flat",
        url="flat",
        metadata_field=None,
        source={"match": recall, "filter": {"topic": "shipping"}},
    )
    create(acme_api, route)
    assert names(resolve_source(acme_api, "flat")) == ["shipping"]


def test_unknown_collection_and_other_embedders_fail_the_source(
    acme: TenantFixture, acme_api: ApiClient, vector_root: Path
) -> None:
    fill(tenant_path(vector_root, acme.schema, "small"), "docs", DOCUMENTS[:1], size=8)
    create(acme_api, qdrant_route(url="small"))
    failed = resolve_source(acme_api, "r")
    assert failed["status"] == "failed"
    assert "8-dimension vectors" in failed["error"] and "384" in failed["error"]
    create(acme_api, qdrant_route("missing", url="small", collection="missing"))
    missing = resolve_source(acme_api, "missing")
    assert missing["status"] == "failed" and "no collection named 'missing'" in missing["error"]


@pytest.fixture
def held_directory(acme: TenantFixture, vector_root: Path) -> Iterator[Path]:
    path = tenant_path(vector_root, acme.schema, "held")
    fill(path, "docs", DOCUMENTS)
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "holding"
    try:
        yield path
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)


def test_a_directory_another_process_holds_is_refused_in_plain_words(
    acme_api: ApiClient, held_directory: Path
) -> None:
    create(acme_api, qdrant_route(url="held"))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "failed"
    assert "open in another process" in source["error"]


def test_the_platforms_qdrant_keeps_each_tenants_collections_apart(
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    vector_root: Path,
    settings: Any,
) -> None:
    platform = vector_root / "platform-qdrant"
    settings.VECTOR_QDRANT_URL = str(platform)  # the platform's Qdrant, in local mode here
    fill(platform, f"{acme.schema}__docs", DOCUMENTS)
    seed = {"collection": "docs", "reuse_cache_connection": True, "metadata_field": "metadata"}
    route = backend_route("seed", "qdrant", seed, match=RECALL_ALL)
    create(acme_api, route)
    assert names(resolve_source(acme_api, "seed"))[0] == "warranty"
    create(globex_api, route)
    other = resolve_source(globex_api, "seed")
    assert other["status"] == "failed" and f"'{globex.schema}__docs'" in other["error"]


@pytest.mark.parametrize("url", ["/var/lib/qdrant", "../kb", "a/b", "ftp://host/x"])
def test_a_url_naming_the_platforms_disk_is_refused(acme_api: ApiClient, url: str) -> None:
    response = acme_api.post("/api/v1/routes", qdrant_route(url=url))
    assert response.status_code == 400, response.content
    assert "local-mode directory" in response.json()["error"]["message"]


def test_a_server_url_goes_through_the_outbound_guard(
    acme_api: ApiClient, vector_root: Path
) -> None:
    create(acme_api, qdrant_route(url="http://127.0.0.1:6333", api_key="qdrant-secret-key"))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "failed"
    assert "refused" in source["error"] and "allow-list" in source["error"]
    assert "qdrant-secret-key" not in json.dumps(source)


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_a_slow_server_times_out_at_the_source_deadline_and_gets_the_key(
    acme: TenantFixture, acme_api: ApiClient, vector_root: Path
) -> None:
    import qdrant_client  # noqa: F401  (imported before the source's clock starts)

    from tests.loopback import Reply, outbound_allowlist, running_service

    with running_service() as service, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        service.responder = lambda seen: Reply(delay_s=30)
        route = qdrant_route(
            url=service.base, api_key="qdrant-secret-key", source={"timeout_ms": 4000}
        )
        create(acme_api, route)
        source = resolve_source(acme_api, "r")
        assert source["status"] == "timeout", source
        assert service.requests and service.requests[0].headers["api-key"] == "qdrant-secret-key"
    assert "qdrant-secret-key" not in json.dumps(source)
