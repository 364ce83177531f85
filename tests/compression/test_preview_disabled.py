"""The compression preview of a plugin configuration that is off (``enabled: false``) answers 200
``skip_reason: disabled`` before it reads the request body, as vLLM Semantic Router does: missing
or malformed messages do not matter when nothing would be compressed. The configuration itself is
still checked."""

from __future__ import annotations

from typing import Any

import pytest

from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture

PREVIEW = "/api/v1/plugins/context/compression/preview"
OFF = {"enabled": False, "compress": {"mode": "always"}}


@pytest.mark.parametrize(
    "rest",
    [
        {},  # no request_body at all
        {"request_body": {}},  # no messages
        {"request_body": {"messages": "not a list"}},
        {"request_body": {"messages": [{"role": "wizard", "content": 5}]}},
        {"request_body": "not an object"},
        {"request_body": {"messages": [{"role": "user", "content": "hi"}]}},
    ],
)
def test_a_disabled_configuration_answers_before_the_messages_are_read(
    acme_api: ApiClient, rest: dict[str, Any]
) -> None:
    response = acme_api.post(PREVIEW, {"configuration": OFF, **rest})
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["valid"] is True
    assert (answer["applied"], answer["skip_reason"], answer["tokens_saved"]) == (
        False,
        "disabled",
        0,
    )
    assert any("configuration.enabled is false" in warning for warning in answer["warnings"])


def test_the_disabled_configuration_is_still_checked(acme_api: ApiClient) -> None:
    response = acme_api.post(PREVIEW, {"configuration": {"enabled": False, "mode": "always"}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "configuration.mode"


def test_an_enabled_configuration_still_needs_its_request_body(acme_api: ApiClient) -> None:
    response = acme_api.post(PREVIEW, {"configuration": {**OFF, "enabled": True}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "request_body"


def test_the_preview_still_needs_its_scope(acme: TenantFixture) -> None:
    key = issue_api_key(tenant=acme.tenant, scopes="resolve").plain_key  # no compression.preview
    response = ApiClient(key).post(PREVIEW, {"configuration": OFF})
    assert response.status_code == 403
