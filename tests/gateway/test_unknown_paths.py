"""An unknown path under /v1 answers 404 in the shape its caller's provider client reads:
OpenAI's (``error.type`` ``invalid_request_error``, ``code`` ``not_found``), or Anthropic's when
the request shows an Anthropic client (its ``x-api-key`` or ``anthropic-version`` header) or the
path lies under ``/v1/messages``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture

OPENAI_PATHS = ["/v1/unknown", "/v1/embeddings", "/v1/chat/completions/extra", "/v1"]
ANTHROPIC_PATHS = ["/v1/messages/batches", "/v1/messages/count_tokens/x"]


def openai_not_found(response: Any, path: str) -> None:
    assert response.status_code == 404, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response["x-context-error-code"] == "not_found"
    assert response.json() == {
        "error": {
            "message": f"no such endpoint: {path}",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }


def anthropic_not_found(response: Any, path: str) -> None:
    assert response.status_code == 404, response.content
    assert response["x-context-error-code"] == "not_found"
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": f"no such endpoint: {path}",
            "code": "not_found",
        },
    }


@pytest.mark.parametrize("path", OPENAI_PATHS)
def test_an_unknown_path_answers_in_openais_shape(acme: TenantFixture, path: str) -> None:
    for api in (ApiClient(acme.key), ApiClient(None)):
        openai_not_found(api.get(path), path)
        openai_not_found(api.post(path, {"model": "x"}), path)


@pytest.mark.parametrize("path", ANTHROPIC_PATHS)
def test_an_unknown_path_under_messages_answers_in_anthropics_shape(
    acme: TenantFixture, path: str
) -> None:
    anthropic_not_found(ApiClient(acme.key).post(path, {"model": "x"}), path)


@pytest.mark.parametrize(
    "headers",
    [{"x-api-key": "cp_anything"}, {"anthropic-version": "2023-06-01"}],
)
def test_an_anthropic_client_gets_anthropics_shape(
    acme: TenantFixture, headers: dict[str, str]
) -> None:
    api = ApiClient(None)
    anthropic_not_found(api.post("/v1/unknown", {"model": "x"}, headers=headers), "/v1/unknown")
    anthropic_not_found(api.get("/v1/models/x/y", headers=headers), "/v1/models/x/y")


def test_the_rest_api_keeps_its_envelope(acme: TenantFixture) -> None:
    response = ApiClient(acme.key).get("/api/v1/nope", headers={"anthropic-version": "1"})
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": "no such endpoint: /api/v1/nope", "param": None}
    }
