"""The before/after comparison of the bench (scripts/bench_compare.py): its medians and ratios, and
where its part goes in docs/benchmarks.md."""

from __future__ import annotations

from scripts.bench_compare import ComparedRun, CompareResults
from scripts.report import splice_section
from scripts.report_compare import compare_checks


def compared(rates: dict[tuple[str, int], float]) -> CompareResults:
    results = CompareResults(
        section="http_path",
        date="today",
        quick=True,
        before="aaaaaaa",
        after="bbbbbbb",
        seconds=3.0,
        warmup_s=1.0,
        server="gunicorn",
        measurements=["resolve"],
    )
    for (code, number), rate in rates.items():
        results.runs.append(ComparedRun("resolve", code, number, rate, 1.0, 2.0, 0, 0.5, 1.0))
    return results


def test_medians_ratio_and_verdict() -> None:
    results = compared(
        {
            ("before", 0): 100.0,
            ("after", 0): 90.0,
            ("after", 1): 120.0,
            ("before", 1): 110.0,
            ("before", 2): 300.0,
            ("after", 2): 100.0,
        }
    )
    assert results.median_rate("resolve", "before") == 110.0
    assert results.median_rate("resolve", "after") == 100.0
    assert round(results.ratio("resolve"), 3) == 0.909
    assert [round(r, 2) for r in results.round_ratios("resolve")] == [0.9, 1.09, 0.33]
    [check] = compare_checks(results)
    assert not check.passed


def test_no_slower_passes() -> None:
    results = compared({("before", 0): 100.0, ("after", 0): 96.0})
    [check] = compare_checks(results)
    assert check.passed


def test_part_goes_after_its_section_then_in_place() -> None:
    page = "# B\n\n<!-- s:start -->\nS\n<!-- s:end -->\n\n<!-- t:start -->\nT\n<!-- t:end -->\n"
    first = splice_section(
        page,
        "<!-- c:start -->\nC1\n<!-- c:end -->",
        "<!-- c:start -->",
        "<!-- c:end -->",
        "<!-- s:end -->",
    )
    assert first.index("C1") < first.index("<!-- t:start -->")
    assert first.index("<!-- s:end -->") < first.index("C1")
    again = splice_section(
        first,
        "<!-- c:start -->\nC2\n<!-- c:end -->",
        "<!-- c:start -->",
        "<!-- c:end -->",
        "<!-- s:end -->",
    )
    assert "C1" not in again and again.count("C2") == 1
