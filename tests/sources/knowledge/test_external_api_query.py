"""The ``external_api`` backend's GET requests keep the endpoint's own query string (an API key,
an index name) beside the template's parameters, against a real search service on loopback."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from tests.conftest import ApiClient
from tests.loopback import Service
from tests.sources.knowledge.conftest import resolve
from tests.sources.knowledge.test_external_api import (
    PINECONE,
    PINECONE_MAPPING,
    QUESTION,
    create_route,
    external_route,
    source_of,
)


def test_a_get_keeps_the_endpoints_own_query(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(PINECONE)
    config = {
        "method": "GET",
        "request_format": {"q": "{{query}}", "k": "{{top_k}}", "filter": "{{filter}}"},
        "response": PINECONE_MAPPING,
    }
    endpoint = service.url("/search?index=support&api_key=k-123&k=99")
    route = external_route(
        "r",
        endpoint,
        config=config,
        match={"recall": {"top_k": 4, "min_similarity": 0.0}},
        filter={"topic": "billing"},
    )
    create_route(acme_api, route)
    assert source_of(resolve(acme_api, "r", QUESTION))["status"] == "ok"
    [seen] = service.requests
    url = urlsplit(seen.path)
    assert (seen.method, url.path) == ("GET", "/search")
    params = parse_qs(url.query)
    # The endpoint's own parameters are kept; the template's are added, and its k wins.
    assert params["index"] == ["support"] and params["api_key"] == ["k-123"]
    assert params["q"] == [QUESTION] and params["k"] == ["4"]
    assert json.loads(params["filter"][0]) == {"topic": "billing"}
