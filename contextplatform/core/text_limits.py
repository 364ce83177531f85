"""Text at the API's boundary, one policy for every entry: a string that holds a NUL character
(PostgreSQL refuses it in text and JSON) or an unpaired surrogate (no UTF-8 encoder takes it: the
estimator, the database and the model's client would each fail on it) is refused with a 400 that
names where it is, before a view, a model or the database sees it. Refused, not stripped: a
changed id or message would silently be another one.

Bodies: JSON through orjson, which bounds nesting and refuses surrogates itself (named here by a
second, slower parse that only a refused body pays); a NUL comes in only as the escape ``\\u0000``
(orjson refuses a raw control character), so a body without that escape is not walked at all.
Path and query parameters: checked by the API views before the handler runs, path parameters
also bounded in length (every id column they reach is at most ``MAX_PATH_PARAM_CHARS``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from contextplatform.core.errors import ApiError, invalid_request

NUL_PROBLEM = "contains a NUL character"
SURROGATE_PROBLEM = "contains an unpaired surrogate"
# orjson's own limit: a deeper body is refused by the parser, never a RecursionError.
MAX_JSON_DEPTH = 1024
# The longest id column a path parameter reaches (user ids, session keys, document ids).
MAX_PATH_PARAM_CHARS = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
_NUL_ESCAPE = b"\\u0000"


class MalformedJson(ValueError):
    """The bytes are no JSON document (syntax, nesting, encoding): what each entry reports in its
    own words (the REST API's parse error, the gateway's provider shape)."""


def text_problem(text: str) -> str | None:
    """What spoils ``text`` for storage and encoding, or None."""
    if "\x00" in text:
        return NUL_PROBLEM
    if not text.isascii() and _SURROGATE.search(text):
        return SURROGATE_PROBLEM
    return None


@dataclass(frozen=True)
class BadText:
    param: str | None
    problem: str
    # The key itself, when it is a member's name that is spoilt, not its value.
    key: str | None = None

    @property
    def message(self) -> str:
        where = self.param or "request body"
        if self.key is not None:
            return f"{where}: the key {self.key!r} {self.problem}"
        return f"{where}: {self.problem}"

    def error(self) -> ApiError:
        return invalid_request(self.message, self.param)


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@dataclass(frozen=True)
class _Key:
    """A member's name, walked in its place: before the member's value."""

    name: str


def find_bad_text(value: Any, prefix: str = "") -> BadText | None:
    """The first spoilt string of a JSON value, keys included, in document order. A loop, not
    recursion: orjson's depth limit is deeper than Python's recursion limit."""
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                return BadText(path or None, problem)
        elif isinstance(item, _Key):
            if problem := text_problem(item.name):
                return BadText(path or None, problem, key=item.name)
        elif isinstance(item, dict):
            for key, member in reversed(item.items()):
                stack.append((_member(path, str(key)), member))
                stack.append((path, _Key(str(key))))
        elif isinstance(item, list):
            stack.extend(
                (f"{path}[{index}]", member) for index, member in reversed(list(enumerate(item)))
            )
    return None


def refuse_bad_text(value: Any, prefix: str = "") -> None:
    """Raise the API's ``invalid_request`` for the first spoilt string of ``value``."""
    found = find_bad_text(value, prefix)
    if found is not None:
        raise found.error()


def _surrogate_refusal(raw: bytes) -> ApiError:
    """Where the escaped surrogate orjson refused is: the standard library takes it (into a str
    no encoder takes), and the walk names its field."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        value = None
    found = find_bad_text(value) if value is not None else None
    if found is not None:
        return found.error()
    return invalid_request(f"request body {SURROGATE_PROBLEM}")


def loads(raw: bytes) -> Any:
    """A JSON body as values, or refused: ``MalformedJson`` for what is no JSON, the API's
    ``invalid_request`` naming the field for a spoilt string."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        said = str(error)
        if "depth limit" in said:
            raise MalformedJson(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
        if "not valid UTF-8" in said:
            raise MalformedJson("not valid UTF-8") from None
        if "surrogate" in said:
            raise _surrogate_refusal(raw) from None
        raise MalformedJson(said) from None
    if _NUL_ESCAPE in raw:
        refuse_bad_text(value)
    return value


def refuse_bad_params(
    path: Mapping[str, Any],
    query: Iterable[tuple[str, str]],
    *,
    max_path_chars: int = MAX_PATH_PARAM_CHARS,
) -> None:
    """Path parameters (by name) and query parameters (name, value pairs): spoilt text refused,
    path parameters longer than any id column refused before a query or write sees them."""
    for name, value in path.items():
        if not isinstance(value, str):
            continue
        if problem := text_problem(value):
            raise BadText(name, problem).error()
        if len(value) > max_path_chars:
            raise invalid_request(f"{name}: must be at most {max_path_chars} characters", name)
    for name, value in query:
        if problem := text_problem(name):
            raise invalid_request(f"the query parameter {name!r} {problem}")
        if problem := text_problem(value):
            raise BadText(name, problem).error()


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_PATH_PARAM_CHARS",
    "NUL_PROBLEM",
    "SURROGATE_PROBLEM",
    "BadText",
    "MalformedJson",
    "find_bad_text",
    "loads",
    "refuse_bad_params",
    "refuse_bad_text",
    "text_problem",
]
