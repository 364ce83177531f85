"""The small JSON path of connectors (``sources/json_select.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from sources import json_select

ANSWER = {
    "accounts": [{"id": "a", "balance": 1}, {"id": "b", "balance": 2}],
    "owner": {"name": "Ann", "odd key": {"x.y": 5}},
    "count": 2,
}


def values(path: str, answer: Any = ANSWER) -> list[Any]:
    return [value for _, value in json_select.select(answer, json_select.parse(path))]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$", [ANSWER]),
        ("$.count", [2]),
        ("$.accounts[*]", ANSWER["accounts"]),
        ("$.accounts[*].balance", [1, 2]),
        ("$.accounts[1].id", ["b"]),
        ("$.accounts[-1].id", ["b"]),
        ("$.accounts[5]", []),
        ("$.owner.*", ["Ann", {"x.y": 5}]),
        ("$.owner['odd key'][\"x.y\"]", [5]),
        ("$.missing.deeper[*]", []),
        ("$.count[*]", []),
    ],
)
def test_paths_select_in_document_order(path: str, expected: list[Any]) -> None:
    assert values(path) == expected


def test_each_match_keeps_its_concrete_path() -> None:
    found = json_select.select(ANSWER, json_select.parse("$.accounts[*].id"))
    assert [where for where, _ in found] == ["$.accounts[0].id", "$.accounts[1].id"]


@pytest.mark.parametrize("path", ["accounts", "$accounts", "$.", "$[?(@.a)]", "$..id", "$[1:2]"])
def test_other_syntax_is_refused(path: str) -> None:
    with pytest.raises(json_select.PathError):
        json_select.parse(path)
