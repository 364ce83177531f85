"""The connector templates (``sources/realtime_templates.py``): where each field may land
and how it is encoded there."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sources import realtime_templates as templates

URL = "https://bank.example/accounts/{user}/balance?session={session}&q={query}"


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_any_value_stays_inside_its_path_segment_or_query_value(user: str, query: str) -> None:
    values = {"user": user, "session": "s", "query": query}
    if user in (".", ".."):
        with pytest.raises(templates.RenderError):
            templates.render_url(URL, values)
        return
    parts = urlsplit(templates.render_url(URL, values))
    assert (parts.scheme, parts.netloc, parts.fragment) == ("https", "bank.example", "")
    segments = parts.path.split("/")
    assert len(segments) == 4 and segments[1] == "accounts" and segments[3] == "balance"
    assert unquote(segments[2]) == user
    pairs = [pair.split("=") for pair in parts.query.split("&")]
    assert [key for key, _ in pairs] == ["session", "q"]
    assert unquote(pairs[1][1]) == query


def test_literal_braces_are_written_twice() -> None:
    assert templates.check_url("https://h.example/{{x}}/{user}") == ["user"]
    rendered = templates.render_url("https://h.example/{{x}}/{user}", {"user": "a b"})
    assert rendered == "https://h.example/{x}/a%20b"


@pytest.mark.parametrize(
    "url",
    [
        "https://{user}/",
        "https://api.{user}.example/",
        "https://h.example:{user}/",
        "https://{user}:pw@h.example/",
        "http{user}://h.example/",
        "//h.example/{user}",
        "https:///{user}",
    ],
)
def test_a_field_outside_the_path_and_query_is_refused(url: str) -> None:
    with pytest.raises(templates.TemplateError):
        templates.check_url(url)


def test_headers_are_filled_as_text_and_control_characters_refused() -> None:
    headers = {"X-User": "id={user}"}
    assert templates.check_headers(headers) == {"user"}
    assert templates.render_headers(headers, {"user": "a/b c"}) == {"X-User": "id=a/b c"}
    with pytest.raises(templates.RenderError, match="control character"):
        templates.render_headers(headers, {"user": "a\r\nX-Admin: 1"})


def test_the_body_s_strings_are_filled_its_keys_and_other_values_kept() -> None:
    body = {"{user}": ["{query}", 1, True, None, {"deep": "x {session} y"}]}
    assert templates.body_fields(body) == {"query", "session"}
    filled = templates.render_body(body, {"user": "u", "session": 's"1', "query": "q\\"})
    assert filled == {"{user}": ["q\\", 1, True, None, {"deep": 'x s"1 y'}]}
