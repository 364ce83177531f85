"""The ``milvus`` backend against Milvus Lite (the ``milvus-lite`` package: the Milvus engine in
this process, on a file), through a route's resolve: the filter passed down as a Milvus
expression, a collection filled by another process (reopened, so not loaded: the backend loads
it), a file another process holds, a hung server, an idle connection, and the configuration
refused where it would name the platform's disk. What both engines do alike (scores, top_k, the
platform's Milvus, the outbound guard) is tested over both in ``test_vector_engines.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.sources.backends.conftest import (
    DOCUMENTS,
    RECALL_ALL,
    backend_route,
    create,
    kept,
    resolve_source,
    tenant_path,
)
from tests.sources.backends.engines import fill_here, milvus_route, rows

FILL = textwrap.dedent(
    """
    import json, sys
    from pymilvus import DataType, MilvusClient

    path, collection, rows_file, hold = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    rows = json.load(open(rows_file))
    client = MilvusClient(uri=path)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=len(rows[0]["vector"]))
    schema.add_field("content", DataType.VARCHAR, max_length=4000)
    schema.add_field("metadata", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="HNSW", metric_type="COSINE",
                    params={"M": 16, "efConstruction": 64})
    client.create_collection(collection, schema=schema, index_params=index)
    client.insert(collection, rows)
    print("filled", flush=True)
    if hold == "hold":
        sys.stdin.read()  # keep the file open until the test closes our stdin
    client.close()
    """
)


def fill_elsewhere(
    path: Path, collection: str, documents: list[dict[str, Any]], *, hold: bool = False
) -> subprocess.Popen[str]:
    """Fill a collection from another process; ``hold`` keeps it running with the file open."""
    rows_file = path.parent / f"{collection}.rows.json"
    rows_file.write_text(json.dumps(rows(documents)))
    process = subprocess.Popen(
        [sys.executable, "-c", FILL, str(path), collection, str(rows_file), "hold" if hold else ""],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "filled"
    if not hold:
        assert process.wait(timeout=120) == 0
    return process


@pytest.fixture
def lite_file(acme: TenantFixture, vector_root: Path) -> Path:
    """acme's Milvus Lite file ``kb.db``, its collection ``docs`` filled in this process."""
    path = tenant_path(vector_root, acme.schema, "kb.db")
    fill_here(path, "docs", DOCUMENTS)
    return path


def test_a_quoted_filter_value_stays_inside_the_milvus_literal(
    acme_api: ApiClient, lite_file: Path
) -> None:
    recall = {"recall": {"top_k": 2, "min_similarity": -1}}
    nothing = {"match": recall, "filter": {"topic": 'nothing " or true or "'}}
    create(acme_api, milvus_route("quoted", source=nothing))  # quotes stay inside the literal
    source = resolve_source(acme_api, "quoted")
    assert source["status"] in ("ok", "empty") and kept(source) == []


def test_filter_expression_is_anded_with_the_filter(acme_api: ApiClient, lite_file: Path) -> None:
    create(
        acme_api,
        milvus_route(filter_expression='id != "refund"', source={"filter": {"topic": "billing"}}),
    )
    assert kept(resolve_source(acme_api, "r")) == ["invoice"]


def test_a_collection_filled_by_another_process_is_loaded_before_the_search(
    acme: TenantFixture, acme_api: ApiClient, vector_root: Path
) -> None:
    """Milvus reopens a file's collections unloaded, and searches only loaded ones."""
    path = tenant_path(vector_root, acme.schema, "other.db")
    fill_elsewhere(path, "second", DOCUMENTS[2:])
    from pymilvus import MilvusClient

    probe = MilvusClient(uri=str(path))
    assert probe.get_load_state("second")["state"].name == "NotLoad"
    create(acme_api, milvus_route(uri="other.db", collection="second"))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "ok", source
    assert kept(source) == ["warranty", "shipping"]
    assert probe.get_load_state("second")["state"].name == "Loaded"


def test_a_collection_released_after_it_was_opened_is_loaded_again(
    acme_api: ApiClient, lite_file: Path
) -> None:
    from pymilvus import MilvusClient

    create(acme_api, milvus_route())
    assert resolve_source(acme_api, "r")["status"] == "ok"
    MilvusClient(uri=str(lite_file)).release_collection("docs")
    again = resolve_source(acme_api, "r")
    assert again["status"] == "ok", again
    assert kept(again)[0] == "warranty"


@pytest.fixture
def held_file(acme: TenantFixture, vector_root: Path) -> Iterator[Path]:
    path = tenant_path(vector_root, acme.schema, "held.db")
    process = fill_elsewhere(path, "docs", DOCUMENTS, hold=True)
    try:
        yield path
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)


def test_a_file_another_process_holds_is_refused_in_plain_words(
    acme_api: ApiClient, held_file: Path
) -> None:
    create(acme_api, milvus_route(uri="held.db"))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "failed"
    assert "open in another process" in source["error"]
    assert "one platform process" in source["error"]


def test_unknown_collection_and_other_embedders_fail_the_source(
    acme: TenantFixture, acme_api: ApiClient, lite_file: Path, vector_root: Path
) -> None:
    create(acme_api, milvus_route(collection="missing"))
    source = resolve_source(acme_api, "r")
    assert source["status"] == "failed" and "no collection named 'missing'" in source["error"]

    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=str(lite_file))
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
    schema.add_field("content", DataType.VARCHAR, max_length=100)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
    client.create_collection("small", schema=schema, index_params=index)
    create(acme_api, milvus_route("small", collection="small"))
    failed = resolve_source(acme_api, "small")
    assert failed["status"] == "failed"
    assert "8-dimension vectors" in failed["error"] and "384" in failed["error"]


@pytest.mark.parametrize(
    "uri", ["/etc/kb.db", "../kb.db", "sub/kb.db", "kb", "file:///tmp/kb.db", "unix:/tmp/m.sock"]
)
def test_a_uri_naming_the_platforms_disk_is_refused(acme_api: ApiClient, uri: str) -> None:
    response = acme_api.post("/api/v1/routes", milvus_route(uri=uri))
    assert response.status_code == 400, response.content
    assert "Milvus Lite" in response.json()["error"]["message"]


def test_an_external_database_recalls_by_embedding(acme_api: ApiClient) -> None:
    route = milvus_route(source={"match": {"recall": {"method": "bm25"}}})
    response = acme_api.post("/api/v1/routes", route)
    assert response.status_code == 400
    assert "recalls by embedding" in response.json()["error"]["message"]


@pytest.fixture
def silent_server(acme: TenantFixture) -> Iterator[int]:
    """A loopback TCP port that accepts connections and never answers (a hung Milvus)."""
    import socket
    import threading

    from tests.loopback import outbound_allowlist

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_hung_server_times_out_at_the_source_deadline(
    acme_api: ApiClient, silent_server: int, vector_root: Path
) -> None:
    route = milvus_route(uri=f"http://127.0.0.1:{silent_server}", source={"timeout_ms": 600})
    create(acme_api, route)
    source = resolve_source(acme_api, "r")
    assert source["status"] == "timeout", source


def test_a_hybrid_falls_back_from_milvus_to_openai_file_search(
    acme: TenantFixture, acme_api: ApiClient, lite_file: Path
) -> None:
    from tests.loopback import outbound_allowlist, running_service

    page = {
        "object": "vector_store.search_results.page",
        "data": [
            {
                "file_id": "file-1",
                "filename": "warranty.md",
                "score": 0.8,
                "attributes": {},
                "content": [{"type": "text", "text": "Two-year warranty on headphones."}],
            }
        ],
    }
    with running_service() as service, outbound_allowlist(acme.schema, ["127.0.0.1"]):
        service.answer(page)
        config = {
            "primary": {
                "backend": "milvus",
                "backend_config": {"collection": "missing", "uri": "kb.db", "token": "t0ken"},
            },
            "fallback": {
                "backend": "openai",
                "backend_config": {
                    "vector_store_id": "vs_1",
                    "api_key": "sk-fallback",
                    "base_url": service.url("/v1"),
                },
            },
        }
        create(acme_api, backend_route("h", "hybrid", config, match=RECALL_ALL))
        source = resolve_source(acme_api, "h")
        assert source["status"] == "ok", source
        assert source["notes"]["served_by"] == "fallback"
        assert "no collection named 'missing'" in source["notes"]["primary_error"]
        assert kept(source) == ["file-1"]
        assert service.requests[-1].headers["authorization"] == "Bearer sk-fallback"

        config["primary"]["backend_config"]["collection"] = "docs"
        create(acme_api, backend_route("h2", "hybrid", config, match=RECALL_ALL))
        primary = resolve_source(acme_api, "h2")
        assert primary["notes"]["served_by"] == "primary" and kept(primary)[0] == "warranty"


def test_an_idle_connection_to_a_lite_file_keeps_serving(
    acme_api: ApiClient, lite_file: Path
) -> None:
    """The Milvus Lite server (gRPC in this process) answers keepalive pings between calls with
    GOAWAY "too_many_pings" after about 20 s, and a connection shared with such a client cannot
    recover. Another client of the file (an operator's script) idles past that before the route's
    first resolve, and the route's own connection idles past it between two resolves: both work."""
    import time

    from pymilvus import MilvusClient

    script = MilvusClient(uri=str(lite_file))  # pymilvus' defaults: pings every 10 s
    script.load_collection("docs")
    create(acme_api, milvus_route())
    time.sleep(35)  # the server's ping policy, not a measurement
    first = resolve_source(acme_api, "r")
    assert first["status"] == "ok", first
    time.sleep(35)
    again = resolve_source(acme_api, "r")
    assert again["status"] == "ok", again
    script.close()
