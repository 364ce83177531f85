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
    [b"{not json", b'{"a": nan}', b'{"a": "\xed\xa0\x80"}'],
    ids=["malformed", "nan (no constant JSON or Python has)", "raw surrogate (not UTF-8)"],
)
def test_bad_bodies_are_a_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError, match="JSON parse error"):
        parse(raw)


@pytest.mark.parametrize(
    ("levels", "param"),
    # Past orjson's own limit (1,024 levels) the parser stops before any walk could name a place.
    [(65, "a" + "[0]" * 63), (300, "a" + "[0]" * 63), (1025, None), (10_000, None)],
)
def test_nesting_past_64_levels_says_so_naming_where(levels: int, param: str | None) -> None:
    with pytest.raises(ApiError) as refused:
        parse(b'{"a": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}")
    assert (refused.value.code, refused.value.status) == ("invalid_request", 400)
    assert refused.value.param == param
    assert refused.value.message.endswith("nested deeper than 64 levels")


def test_nesting_of_64_levels_passes() -> None:
    assert parse(b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}") is not None


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"a": [1, 1e20]}', "a[1]"),
        (b'{"a": 9223372036854775808}', "a"),
        (b'{"a": -9223372036854775809}', "a"),
        (b'{"a": {"b": 18446744073709551616}}', "a.b"),
        (b'{"a": 1e400}', "a"),
        (b'{"a": [NaN]}', "a[0]"),
        (b'{"a": -Infinity}', "a"),
        (b"1e20", None),
    ],
)
def test_numbers_past_what_storage_round_trips_are_refused_naming_where(
    raw: bytes, param: str | None
) -> None:
    with pytest.raises(ApiError) as refused:
        parse(raw)
    assert refused.value.param == param
    assert refused.value.message.endswith("a number must be finite and within ±9223372036854775807")


def test_the_widest_numbers_storage_round_trips_pass() -> None:
    raw = b'{"a": [9223372036854775807, -9223372036854775807, 9.2e18, 1.5e-300, 2.5]}'
    assert parse(raw) == {"a": [2**63 - 1, -(2**63 - 1), 9.2e18, 1.5e-300, 2.5]}


def test_the_renderer_writes_what_storage_hands_back() -> None:
    """jsonb gives 1e20 back as an integer past 64 bits; a value stored before nesting was bounded
    may be deeper than orjson writes: both render, the integer as the float it stands for."""
    deep: list[object] = [10**20]
    for _ in range(400):
        deep = [deep]
    rendered = FastJSONRenderer().render({"n": 10**20, "huge": -(10**400), "deep": deep})
    assert rendered.startswith(b'{"n":1e+20,"huge":"-1000')
    assert rendered.count(b"[") == 401 and b"[1e+20]" in rendered


DEEP = b'{"a": ' + b"[" * 60 + b'"\\u0000"' + b"]" * 60 + b"}"


@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        (b'{"text": "\\ud800"}', "text", "text: contains an unpaired surrogate"),
        (b'{"a": [1, {"b": "x\\udc00"}]}', "a[1].b", "a[1].b: contains an unpaired surrogate"),
        (b'{"a": {"k\\ud800": 1}}', "a", "a: the key 'k\\ud800' contains an unpaired surrogate"),
        (b'{"m": [{"c": "a\\u0000b"}]}', "m[0].c", "m[0].c: contains a NUL character"),
        (b'{"a": {"k\\u0000": 1}}', "a", "a: the key 'k\\x00' contains a NUL character"),
        (b'"\\u0000"', None, "request body: contains a NUL character"),
        (DEEP, "a" + "[0]" * 60, "contains a NUL character"),
    ],
    ids=["surrogate", "low surrogate deep", "surrogate key", "nul", "nul key", "top", "60 deep"],
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
    assert response.json()["error"]["message"] == "request body: nested deeper than 64 levels"


def test_a_nul_in_a_body_is_a_400_naming_the_field(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/resolve", {"route": "r", "user": "a\x00b", "request": {}})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "user: contains a NUL character",
        "param": "user",
    }
