"""Values at the API's boundary, one policy for every entry (the REST API's bodies, the gateway's,
route documents, the admin's JSON fields), each refused with a 400 that names where it is, before
a view, a model or the database sees it. Refused, not stripped or rounded: a changed id, message
or number would silently be another one.

- Text: a string that holds a NUL character (PostgreSQL refuses it in text and JSON) or an
  unpaired surrogate (no UTF-8 encoder takes it: the estimator, the database and the model's
  client would each fail on it).
- Nesting: at most ``MAX_JSON_DEPTH`` (64) levels of objects and arrays, plenty for every provider
  body we know; deeper, orjson's renderer (254 levels) and Python's recursion fail on the way out.
- Numbers: what PostgreSQL's jsonb and the renderer both round-trip, integers within
  ±``MAX_JSON_INTEGER`` (2^63 - 1) and finite floats within the same range. jsonb keeps a number
  as ``numeric``: ``1e20`` comes back as the integer 100000000000000000000, which orjson cannot
  write, so one such value stored would fail every later read of it. The gateway, which forwards
  what the provider accepts, leaves numbers to the provider (``loads(numbers=False)``); what it
  stores is read back through ``core/safe_json.py``.

Bodies: JSON through orjson, which refuses NaN, infinities and surrogates itself (named here by a
second, slower parse that only a refused body pays); a NUL comes in only as the escape
``\\u0000`` (orjson refuses a raw control character), so strings are judged only in a body with
that escape. The parsed body is walked once for its numbers and its depth (a few microseconds for
a resolve's body: cheaper than any scan of its bytes for what could spell a wide number); the
gateway's, which leaves numbers to the provider, only when its brackets could nest too deep.

Path and query parameters: checked by the API views before the handler runs, path parameters also
bounded in length (every id column they reach is at most ``MAX_PATH_PARAM_CHARS``)."""

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
# Levels of objects and arrays a JSON value may nest (the outermost one is the first).
MAX_JSON_DEPTH = 64
DEPTH_PROBLEM = f"nested deeper than {MAX_JSON_DEPTH} levels"
# The widest number jsonb and the renderer both round-trip: a signed 64-bit integer.
MAX_JSON_INTEGER = 2**63 - 1
NUMBER_PROBLEM = f"a number must be finite and within ±{MAX_JSON_INTEGER}"
# The longest id column a path parameter reaches (user ids, session keys, document ids).
MAX_PATH_PARAM_CHARS = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
_NUL_ESCAPE = b"\\u0000"


class MalformedJson(ValueError):
    """The bytes are no JSON document (syntax, encoding): what each entry reports in its own
    words (the REST API's parse error, the gateway's provider shape)."""


def text_problem(text: str) -> str | None:
    """What spoils ``text`` for storage and encoding, or None."""
    if "\x00" in text:
        return NUL_PROBLEM
    if not text.isascii() and _SURROGATE.search(text):
        return SURROGATE_PROBLEM
    return None


def number_problem(value: Any) -> str | None:
    """Why the number ``value`` would not round-trip through jsonb and the renderer, or None
    (anything but an int or a float: None; booleans are no numbers here)."""
    found = _leaf(value, numbers=True, text=False)
    return found.problem if found is not None else None


@dataclass(frozen=True)
class BadText:
    """Where a value is refused and why (spoilt text, a number out of range, too deep)."""

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


@dataclass
class _Found:
    problem: str
    key: str | None = None
    # Where, innermost step first (built on the way out of the walk, only for a refused value).
    steps: list[str | int] | None = None

    def at(self, step: str | int) -> _Found:
        if self.steps is None:
            self.steps = []
        self.steps.append(step)
        return self

    def where(self, prefix: str) -> BadText:
        path = prefix
        for step in reversed(self.steps or []):
            path = f"{path}[{step}]" if isinstance(step, int) else _member(path, step)
        return BadText(path or None, self.problem, self.key)


def _leaf(value: Any, numbers: bool, text: bool) -> _Found | None:
    kind = type(value)
    if kind is str:
        if text and (problem := text_problem(value)):
            return _Found(problem)
    # NaN compares false with everything: outside the range as the infinities are.
    elif (
        numbers
        and (kind is int or kind is float)
        and not -MAX_JSON_INTEGER <= value <= MAX_JSON_INTEGER
    ):
        return _Found(NUMBER_PROBLEM)
    return None


def _walk(value: Any, depth: int, numbers: bool, text: bool) -> _Found | None:
    """The first refused part of ``value`` (``depth`` levels already around it), in document
    order. Recursion is safe: it stops at ``MAX_JSON_DEPTH``. Strings and numbers are judged in
    the loop over their container (most of a body's values: no call each)."""
    if isinstance(value, dict):
        members: Any = value.items()
    elif isinstance(value, list):
        members = enumerate(value)
    else:
        return _leaf(value, numbers, text)
    if depth >= MAX_JSON_DEPTH:
        return _Found(DEPTH_PROBLEM)
    keyed = isinstance(value, dict)
    for step, member in members:
        if keyed and text and type(step) is str and (problem := text_problem(step)):
            return _Found(problem, key=step)
        kind = type(member)
        if kind is str:
            if not text or not (problem := text_problem(member)):
                continue
            found: _Found | None = _Found(problem)
        elif kind is dict or kind is list:
            found = _walk(member, depth + 1, numbers, text)
        elif not numbers or member is None or kind is bool:
            continue
        else:
            found = _leaf(member, numbers, text)
        if found is not None:
            return found.at(str(step) if keyed else step)
    return None


def find_bad_value(
    value: Any, prefix: str = "", *, numbers: bool = True, text: bool = True
) -> BadText | None:
    """The first refused part of a JSON value, in document order: spoilt text (keys included,
    unless ``text`` is False), a number out of range (unless ``numbers`` is False), nesting past
    ``MAX_JSON_DEPTH``."""
    found = _walk(value, 0, numbers, text)
    return found.where(prefix) if found is not None else None


def find_bad_text(value: Any, prefix: str = "") -> BadText | None:
    """The first spoilt string of a JSON value (or its nesting past the limit)."""
    return find_bad_value(value, prefix, numbers=False)


def refuse_bad_value(
    value: Any, prefix: str = "", *, numbers: bool = True, text: bool = True
) -> None:
    """Raise the API's ``invalid_request`` for the first refused part of ``value``."""
    found = find_bad_value(value, prefix, numbers=numbers, text=text)
    if found is not None:
        raise found.error()


def refuse_bad_text(value: Any, prefix: str = "") -> None:
    """Raise the API's ``invalid_request`` for the first spoilt string of ``value``."""
    refuse_bad_value(value, prefix, numbers=False)


def _second_parse(raw: bytes) -> Any:
    """The body as the standard library reads it (it takes what orjson refused: escaped
    surrogates, NaN and the infinities), or None."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=float)
    except (ValueError, RecursionError):
        return None


def _named_refusal(raw: bytes, fallback: str, numbers: bool) -> ApiError | None:
    """Where the value orjson refused is, named by the walk over the standard library's parse;
    None when that parse finds nothing to name either."""
    value = _second_parse(raw)
    found = find_bad_value(value, numbers=numbers) if value is not None else None
    if found is not None:
        return found.error()
    return invalid_request(f"request body {fallback}") if fallback else None


def loads(raw: bytes, *, numbers: bool = True) -> Any:
    """A JSON body as values, or refused: ``MalformedJson`` for what is no JSON, the API's
    ``invalid_request`` naming the field for spoilt text, nesting past ``MAX_JSON_DEPTH`` and
    (unless ``numbers`` is False) a number out of range."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        said = str(error)
        if "depth limit" in said:  # orjson's own, 1,024: far past ours
            raise invalid_request(f"request body: {DEPTH_PROBLEM}") from None
        if "not valid UTF-8" in said:
            raise MalformedJson("not valid UTF-8") from None
        if "surrogate" in said:
            raise _named_refusal(raw, SURROGATE_PROBLEM, numbers) or MalformedJson(said) from None
        if numbers and (refusal := _named_refusal(raw, "", numbers)) is not None:
            raise refusal from None  # NaN, Infinity, 1e400: valid to Python, not to JSON
        raise MalformedJson(said) from None
    nul = _NUL_ESCAPE in raw  # orjson refused every other spoilt string itself
    if numbers or nul or raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH:
        refuse_bad_value(value, numbers=numbers, text=nul)
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
    "DEPTH_PROBLEM",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INTEGER",
    "MAX_PATH_PARAM_CHARS",
    "NUL_PROBLEM",
    "NUMBER_PROBLEM",
    "SURROGATE_PROBLEM",
    "BadText",
    "MalformedJson",
    "find_bad_text",
    "find_bad_value",
    "loads",
    "number_problem",
    "refuse_bad_params",
    "refuse_bad_text",
    "refuse_bad_value",
    "text_problem",
]
