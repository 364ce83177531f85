"""Packing context items into the budget by priority."""

from __future__ import annotations

from contextplatform.resolve.packing import PackDecision, pack
from sources.base import ContextItem


def item(name: str, priority: int, tokens: int, source: str = "s") -> ContextItem:
    return ContextItem(source=source, priority=priority, content=name, tokens=tokens)


def names(decisions: list[PackDecision], *, kept: bool | None = None) -> list[str]:
    return [d.item.content for d in decisions if kept is None or d.kept is kept]


def test_highest_priority_first() -> None:
    items = [item("low", 10, 5), item("high", 100, 5), item("mid", 50, 5)]
    decisions, used = pack(items, budget=1000)
    assert names(decisions) == ["high", "mid", "low"]
    assert all(d.kept and d.reason == "kept" for d in decisions)
    assert used == 15


def test_order_is_the_items_original_index() -> None:
    items = [item("low", 10, 5), item("high", 100, 5), item("mid", 50, 5)]
    decisions, _ = pack(items, budget=1000)
    assert [d.order for d in decisions] == [1, 2, 0]
    assert all(items[d.order] is d.item for d in decisions)


def test_high_priority_wins_the_budget_over_low_priority() -> None:
    items = [item("low", 1, 60), item("high", 90, 60)]
    decisions, used = pack(items, budget=100)
    assert names(decisions, kept=True) == ["high"]
    assert names(decisions, kept=False) == ["low"]
    assert used == 60


def test_an_item_that_does_not_fit_is_skipped_and_a_smaller_later_one_still_fits() -> None:
    items = [item("first", 100, 60), item("too-big", 90, 50), item("small", 80, 40)]
    decisions, used = pack(items, budget=100)
    by_name = {d.item.content: d for d in decisions}
    assert by_name["first"].kept
    assert not by_name["too-big"].kept
    assert by_name["too-big"].reason == "over_budget"
    assert by_name["small"].kept  # 60 + 40 == 100 fits exactly
    assert used == 100


def test_oversized_first_item_does_not_block_the_rest() -> None:
    items = [item("huge", 100, 10_000), item("a", 50, 30), item("b", 40, 30), item("c", 30, 30)]
    decisions, used = pack(items, budget=70)
    assert names(decisions, kept=True) == ["a", "b"]
    assert names(decisions, kept=False) == ["huge", "c"]
    assert used == 60


def test_stable_within_priority() -> None:
    items = [
        item("a1", 50, 1, source="a"),
        item("b1", 70, 1, source="b"),
        item("a2", 50, 1, source="a"),
        item("a3", 50, 1, source="a"),
        item("b2", 70, 1, source="b"),
    ]
    decisions, _ = pack(items, budget=1000)
    assert names(decisions) == ["b1", "b2", "a1", "a2", "a3"]


def test_stable_within_priority_when_the_budget_runs_out() -> None:
    items = [item(f"i{n}", 50, 10) for n in range(5)]
    decisions, used = pack(items, budget=30)
    assert names(decisions, kept=True) == ["i0", "i1", "i2"]
    assert names(decisions, kept=False) == ["i3", "i4"]
    assert used == 30


def test_used_is_the_sum_of_kept_tokens_and_never_exceeds_the_budget() -> None:
    sizes = [37, 5, 81, 12, 64, 3, 29, 50, 8, 19]
    items = [item(f"i{n}", priority=(n * 7) % 5, tokens=size) for n, size in enumerate(sizes)]
    for budget in range(0, 320, 7):
        decisions, used = pack(items, budget)
        assert used == sum(d.item.tokens for d in decisions if d.kept)
        assert used <= budget
        assert len(decisions) == len(items)
        assert sorted(d.order for d in decisions) == list(range(len(items)))
        # Greedy: every dropped item would have overflowed the budget at its turn.
        running = 0
        for decision in decisions:
            if decision.kept:
                running += decision.item.tokens
            else:
                assert running + decision.item.tokens > budget


def test_zero_budget_keeps_nothing() -> None:
    items = [item("a", 100, 1), item("b", 10, 20)]
    decisions, used = pack(items, budget=0)
    assert used == 0
    assert [d.kept for d in decisions] == [False, False]
    assert {d.reason for d in decisions} == {"over_budget"}


def test_no_items() -> None:
    assert pack([], budget=100) == ([], 0)


def test_pack_does_not_reorder_the_input() -> None:
    items = [item("low", 1, 5), item("high", 9, 5)]
    pack(items, budget=100)
    assert [i.content for i in items] == ["low", "high"]
