"""The ``qdrant`` backend against qdrant-client's embedded **local mode** (``QdrantClient(path=...)``:
Qdrant's search run inside this process on a directory, not a Qdrant server), through a route's
resolve: the filter passed down as Qdrant conditions on top-level payload keys, other embedders'
collections refused, a directory another process holds, a slow server timed out at the source's
deadline, and the configuration refused where it would name the platform's disk. What both
engines do alike (scores, top_k, the platform's Qdrant, the outbound guard) is tested over both in
``test_vector_engines.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.sources.backends.conftest import (
    DOCUMENTS,
    create,
    resolve_source,
    tenant_path,
)
from tests.sources.backends.engines import fill, names, qdrant_route

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


def test_without_metadata_field_the_filter_names_top_level_payload_keys(
    acme: TenantFixture, acme_api: ApiClient, vector_root: Path
) -> None:
    recall = {"recall": {"top_k": 2, "min_similarity": -1}}
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


@pytest.mark.parametrize("url", ["/var/lib/qdrant", "../kb", "a/b", "ftp://host/x"])
def test_a_url_naming_the_platforms_disk_is_refused(acme_api: ApiClient, url: str) -> None:
    response = acme_api.post("/api/v1/routes", qdrant_route(url=url))
    assert response.status_code == 400, response.content
    assert "local-mode directory" in response.json()["error"]["message"]


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
