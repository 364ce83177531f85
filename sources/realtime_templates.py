"""Templates of a ``realtime_apis`` connector: ``{user}``, ``{session}`` and ``{query}`` filled in
where they may land, and nowhere else.                                                     [pure]

- URL: only in the path and the query string, each value percent-encoded whole (``/``, ``?``,
  ``#``, ``&``, spaces included), so a value can never add a path segment, a parameter or a
  fragment; a template in the scheme, the credentials, the host or the port is refused when the
  route is written (the host is what the outbound guard checks), and a value that would make a
  ``.`` or ``..`` segment is refused when the request is built.
- Headers: values only, as plain text; a value holding a line break or another control character
  is refused when the request is built.
- Body: any JSON value; its strings are templates (keys are not), filled in as text, so the JSON
  encoder escapes them.

``{{`` and ``}}`` are literal braces, as in Python's ``str.format``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

FIELDS = ("user", "session", "query")
SCHEMES = ("http", "https")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
# Set by the HTTP client itself or deciding where the request goes: never the connector's.
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FORMATTER = string.Formatter()


class TemplateError(ValueError):
    """A template that cannot be written (refused when the route is saved)."""


class RenderError(ValueError):
    """The request's values cannot be placed into a template (the connector fails)."""


def fields_of(template: str) -> list[str]:
    """The fields a template names, in order; TemplateError for anything but the three."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as error:
        raise TemplateError(f"{error}; write {{{{ and }}}} for literal braces") from None
    names: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in FIELDS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += (f":{spec}" if spec else "") + "}"
            raise TemplateError(
                f"unknown template field {shown}: templates take {{user}}, {{session}} and "
                "{query}"
            )
        names.append(name)
    return names


def fill(template: str, values: Mapping[str, str], encode: Any = None) -> str:
    """``template`` with each field replaced by its value (``encode``d when given)."""
    parts: list[str] = []
    for literal, name, _, _ in _FORMATTER.parse(template):
        parts.append(literal)
        if name is not None:
            value = values[name]
            parts.append(encode(value) if encode else value)
    return "".join(parts)


def literal(template: str) -> str:
    """The template's own text with braces unescaped and fields left out (for checking it)."""
    return "".join(literal for literal, _, _, _ in _FORMATTER.parse(template))


# --- URLs ------------------------------------------------------------------------------------------


def check_url(template: str) -> list[str]:
    """The fields of a URL template, or TemplateError: an http(s) URL with a host, and fields
    in its path and query string only."""
    names = fields_of(template)
    # Fields stand in as a harmless letter: the URL's structure is the template's own.
    sample = fill(template, dict.fromkeys(FIELDS, "x"))
    parts = urlsplit(template)
    if parts.scheme.lower() not in SCHEMES:
        raise TemplateError("the URL must start with http:// or https://")
    if "{" in parts.netloc or "}" in parts.netloc:  # never valid in a host, a field or not
        raise TemplateError(
            "a template in the host, port or credentials is refused: {user}, {session} and "
            "{query} go in the path or the query string"
        )
    if not urlsplit(sample).hostname:
        raise TemplateError("the URL has no host")
    if "#" in sample:
        raise TemplateError("a connector URL has no #fragment")
    if any(segment in (".", "..") for segment in urlsplit(sample).path.split("/")):
        raise TemplateError("the URL's path has a . or .. segment")
    return names


def encode_component(value: str) -> str:
    """A value percent-encoded whole for a path segment or a query value: every reserved
    character (``/ ? # & = + @ :`` and spaces) is encoded."""
    return quote(value, safe="")


def render_url(template: str, values: Mapping[str, str]) -> str:
    url = fill(template, values, encode_component)
    if any(segment in (".", "..") for segment in urlsplit(url).path.split("/")):
        raise RenderError("a value would make a . or .. path segment")
    return url


# --- headers and body ------------------------------------------------------------------------------


def check_headers(headers: Mapping[str, str]) -> set[str]:
    names: set[str] = set()
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise TemplateError(f"header {name!r}: not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            raise TemplateError(f"header {name!r}: set by the platform, not by a connector")
        try:
            names.update(fields_of(value))
        except TemplateError as error:
            raise TemplateError(f"header {name!r}: {error}") from None
        if CONTROL.search(literal(value)):
            raise TemplateError(f"header {name!r}: the value holds a control character")
    return names


def render_headers(headers: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    rendered: dict[str, str] = {}
    for name, template in headers.items():
        value = fill(template, values)
        if CONTROL.search(value):
            raise RenderError(f"header {name!r}: a value would put a control character in it")
        rendered[name] = value
    return rendered


def body_fields(body: Any) -> set[str]:
    """The fields the body's strings name (TemplateError for a bad one)."""
    if isinstance(body, str):
        return set(fields_of(body))
    if isinstance(body, dict):
        return set().union(*(body_fields(value) for value in body.values()))
    if isinstance(body, list):
        return set().union(*(body_fields(value) for value in body))
    return set()


def render_body(body: Any, values: Mapping[str, str]) -> Any:
    if isinstance(body, str):
        return fill(body, values)
    if isinstance(body, dict):
        return {key: render_body(value, values) for key, value in body.items()}
    if isinstance(body, list):
        return [render_body(value, values) for value in body]
    return body
