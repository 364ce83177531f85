"""``replay.rerun_diff``: two decisions of one request diffed item by item, named by source and
id (or, for records written before items carried ids, by source and title)."""

from __future__ import annotations

from typing import Any

from contextplatform.replay.rerun_diff import diff, is_empty, items_changed, side


def item(
    source: str, ident: str | None, kept: bool, score: float | None = 0.5, **more: Any
) -> dict[str, Any]:
    entry = {"source": source, "title": more.pop("title", None), "score": score, "tokens": 5}
    if ident is not None:
        entry["id"] = ident
    return {**entry, "kept": kept, "reason": "fits" if kept else "over budget", **more}


def decision(items: list[dict[str, Any]], after: int = 100, **sources: str) -> dict[str, Any]:
    lines = [
        {"name": name, "type": "rag", "status": status, "items": 1, "kept": 1}
        for name, status in sources.items()
    ]
    return side(status="ok", sources=lines, items=items, tokens={"before": 10, "after": after})


def test_added_dropped_moved_and_rescored_items() -> None:
    recorded = decision(
        [
            item("docs", "a", True),
            item("docs", "b", True),
            item("docs", "c", True, 0.3),
            item("docs", "d", False),
        ],
        docs="ok",
    )
    rerun = decision(
        [
            item("docs", "b", True),
            item("docs", "a", True),
            item("docs", "c", True, 0.9),
            item("docs", "d", True),
        ],
        after=120,
        docs="ok",
    )
    changes = diff(recorded, rerun)
    assert [(a["id"], a["before"]) for a in changes["added"]] == [("d", "not kept: over budget")]
    assert changes["dropped"] == []
    assert [(m["id"], m["rank"]) for m in changes["moved"]] == [
        ("a", {"recorded": 1, "rerun": 2}),
        ("b", {"recorded": 2, "rerun": 1}),
    ]
    assert [(c["id"], c["score"]) for c in changes["changed"]] == [
        ("c", {"recorded": 0.3, "rerun": 0.9})
    ]
    assert changes["tokens"] == {"recorded": 100, "rerun": 120}
    assert items_changed(changes) == 3 and not is_empty(changes)


def test_two_chunks_of_one_document_are_two_items() -> None:
    recorded = decision([item("docs", "a", True), item("docs", "a", True)])
    rerun = decision([item("docs", "a", True)])
    changes = diff(recorded, rerun)
    assert [(d["id"], d["rank"], d["now"]) for d in changes["dropped"]] == [("a", 2, None)]


def test_a_record_without_ids_is_matched_by_source_and_title() -> None:
    recorded = decision(
        [item("docs", None, True, title="Refunds"), item("rules", None, True)], docs="ok"
    )
    rerun = decision(
        [item("docs", "refund", True, title="Refunds"), item("rules", "sha256:00", True)], docs="ok"
    )
    changes = diff(recorded, rerun)
    assert changes["matched_by"] == "source_and_title"
    assert is_empty(changes)


def test_a_source_whose_status_changed_is_listed() -> None:
    recorded = decision([item("docs", "a", True)], docs="ok", mem="ok")
    rerun = decision([], docs="timeout", web="ok")
    assert diff(recorded, rerun)["sources"] == [
        {
            "name": "docs",
            "status": {"recorded": "ok", "rerun": "timeout"},
            "kept": {"recorded": 1, "rerun": 1},
        },
        {
            "name": "mem",
            "status": {"recorded": "ok", "rerun": None},
            "kept": {"recorded": 1, "rerun": None},
        },
        {
            "name": "web",
            "status": {"recorded": None, "rerun": "ok"},
            "kept": {"recorded": None, "rerun": 1},
        },
    ]
