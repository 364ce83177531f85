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

from contextplatform.core.errors import ApiError
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
    [b"[" * 10_000 + b"]" * 10_000, b"{not json", b'{"a": NaN}', b'{"a": "\xed\xa0\x80"}'],
    ids=["nested 10,000 deep", "malformed", "NaN", "raw surrogate (not UTF-8)"],
)
def test_bad_bodies_are_a_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError, match="JSON parse error"):
        parse(raw)


def test_nesting_too_deep_says_so() -> None:
    with pytest.raises(ParseError, match="nested deeper than 1024 levels"):
        parse(b"[" * 10_000 + b"]" * 10_000)


DEEP = b'{"a": ' + b"[" * 1000 + b'"\\u0000"' + b"]" * 1000 + b"}"


@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        (b'{"text": "\\ud800"}', "text", "text: contains an unpaired surrogate"),
        (b'{"a": [1, {"b": "x\\udc00"}]}', "a[1].b", "a[1].b: contains an unpaired surrogate"),
        (b'{"a": {"k\\ud800": 1}}', "a", "a: the key 'k\\ud800' contains an unpaired surrogate"),
        (b'{"m": [{"c": "a\\u0000b"}]}', "m[0].c", "m[0].c: contains a NUL character"),
        (b'{"a": {"k\\u0000": 1}}', "a", "a: the key 'k\\x00' contains a NUL character"),
        (b'"\\u0000"', None, "request body: contains a NUL character"),
        (DEEP, "a" + "[0]" * 1000, "contains a NUL character"),
    ],
    ids=["surrogate", "low surrogate deep", "surrogate key", "nul", "nul key", "top", "1000 deep"],
)
def test_bad_text_is_refused_naming_where_it_is(
    raw: bytes, param: str | None, message: str
) -> None:
    with pytest.raises(ApiError) as refused:
        parse(raw)
    assert (refused.value.code, refused.value.status) == ("invalid_request", 400)
    assert refused.value.param == param
    assert refused.value.message.endswith(message)


def test_text_that_only_looks_like_an_escape_passes() -> None:
    # A backslash before u0000 (the text \u0000, six characters) is no NUL; a pair is no surrogate.
    assert parse(b'{"a": "\\\\u0000", "b": "\\ud83d\\ude00"}') == {
        "a": "\\u0000",
        "b": "\U0001f600",
    }


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


def test_a_nul_in_a_body_is_a_400_naming_the_field(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/resolve", {"route": "r", "user": "a\x00b", "request": {}})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "user: contains a NUL character",
        "param": "user",
    }
