"""The re-run bench section (scripts/bench_rerun.py): its draft and its verdicts, pure."""

from __future__ import annotations

import copy

from contextplatform.demo.defaults import SUPPORT_ROUTE_CORE
from scripts.bench_rerun import END, START, RerunResults, draft_context, rerun_checks, rerun_section
from scripts.bench_stats import Sizes


def results(removed: int) -> RerunResults:
    measured = RerunResults(
        date="today", quick=True, sizes=Sizes(rounds=2, warmup=1), trials_each=1
    )
    measured.samples_ms = {"live": [1.0, 2.0], "rerun": [2.0, 3.0], "draft": [1.5, 2.5]}
    measured.rerun_unchanged = measured.draft_dropped_docs = 2
    measured.records_written, measured.records_removed = 203, removed
    return measured


def test_the_draft_drops_the_rag_source_alone_and_leaves_the_route_as_it_was() -> None:
    context = copy.deepcopy(SUPPORT_ROUTE_CORE["context"])
    drafted = draft_context(context)
    assert [s["name"] for s in drafted["sources"]] == ["guardrails", "profile", "history"]
    assert context == SUPPORT_ROUTE_CORE["context"]


def test_a_record_left_behind_fails_the_clean_up_check() -> None:
    assert all(check.passed for check in rerun_checks(results(removed=203)))
    clean_up = rerun_checks(results(removed=202))[-1]
    assert not clean_up.passed and "202 removed of 203" in clean_up.measured


def test_the_section_sits_between_its_markers_and_names_its_commit() -> None:
    text = rerun_section(results(removed=203), "abc1234")
    assert text.startswith(START) and text.endswith(END)
    assert "commit abc1234" in text and "## 15. Re-runs" in text
