"""API bodies through orjson: the same JSON out as DRF's renderer writes, and bad bodies in refused
with a 400 in the envelope (too deep, a lone surrogate), never a 500."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid

import pytest
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer

from contextplatform.core.parsers import AnyJSONParser, FastJSONRenderer
from tests.conftest import ApiClient

VALUES = {
    "at": dt.datetime(2026, 12, 1, 18, 30, 5, 123456, tzinfo=dt.UTC),
    "day": dt.date(2026, 12, 1),
    "amount": decimal.Decimal("12.50"),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "text": "Grüße, 東京 — \u2028 end",
    "nested": [{"a": 1, "b": None, "c": [True, 1.5]}],
    3: "an int key",
}


def test_rendered_as_drf_renders_it() -> None:
    ours = FastJSONRenderer().render(VALUES)
    drf = JSONRenderer().render(VALUES)
    assert json.loads(ours) == json.loads(drf)
    assert b'"2026-12-01T18:30:05.123456Z"' in ours  # DRF's form of a time: with Z


def parse(raw: bytes) -> object:
    return AnyJSONParser().parse(io.BytesIO(raw))


def test_parsed_as_json() -> None:
    assert parse(b'{"a": [1, 2.5, "x", null]}') == {"a": [1, 2.5, "x", None]}


@pytest.mark.parametrize(
    "raw",
    [b"[" * 10_000 + b"]" * 10_000, b'{"text": "\\ud800"}', b"{not json", b'{"a": NaN}'],
    ids=["nested 10,000 deep", "lone surrogate", "malformed", "NaN"],
)
def test_bad_bodies_are_a_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError, match="JSON parse error"):
        parse(raw)


def test_a_body_nested_too_deep_is_a_400_in_the_envelope(acme_api: ApiClient) -> None:
    deep = b"[" * 10_000 + b"]" * 10_000
    response = acme_api.client.post(
        "/api/v1/resolve",
        data=b'{"route": "r", "request": ' + deep + b"}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {acme_api.key}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "malformed request body" in response.json()["error"]["message"]
