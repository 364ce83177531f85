"""The reflection gate: block patterns, recency decay, near-duplicate removal, the token budget
with the script-aware estimate, and the disabled gate. Pure: no database."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from contextplatform.core.estimation import ReflectionEstimator
from memory.reflection import (
    GateDecision,
    RecalledMemory,
    ReflectionConfig,
    age_days,
    cosine,
    decayed,
    injected_text,
    kept_memories,
    normalise_text,
    reflect,
    similarity,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def memory(
    id: int,
    content: str,
    score: float = 0.8,
    *,
    age: float = 0.0,
    embedding: list[float] | None = None,
    kind: str = "fact",
) -> RecalledMemory:
    return RecalledMemory(
        id=id,
        content=content,
        kind=kind,
        score=score,
        updated_at=NOW - timedelta(days=age),
        embedding=embedding,
    )


def by_id(decisions: list[GateDecision]) -> dict[int | str, GateDecision]:
    return {decision.memory.id: decision for decision in decisions}


def kept_ids(decisions: list[GateDecision]) -> list[int | str]:
    return [m.id for m in kept_memories(decisions)]


# --------------------------------------------------------------------------------------------
# Configuration


def test_defaults_are_vllm_semantic_routers() -> None:
    config = ReflectionConfig()
    assert config.enabled is True
    assert config.max_inject_tokens == 2048
    assert config.recency_half_life_days == 30
    assert config.dedup_threshold == 0.90
    assert config.block_patterns == []


def test_half_life_accepts_vllm_semantic_routers_name() -> None:
    assert ReflectionConfig(recency_decay_days=7).recency_half_life_days == 7
    assert ReflectionConfig.model_validate({"recency_decay_days": 3}).recency_half_life_days == 3
    assert ReflectionConfig(recency_half_life_days=9).recency_half_life_days == 9
    with pytest.raises(ValidationError, match="not both"):
        ReflectionConfig.model_validate({"recency_decay_days": 3, "recency_half_life_days": 4})


@pytest.mark.parametrize(
    "fields",
    [
        {"unknown": 1},
        {"algorithm": "heuristic"},
        {"max_inject_tokens": 0},
        {"recency_half_life_days": 0},
        {"recency_decay_days": -1},
        {"dedup_threshold": 0},
        {"dedup_threshold": 1.5},
        {"block_patterns": "secret"},
    ],
)
def test_bad_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ReflectionConfig.model_validate(fields)


def test_a_bad_regex_is_refused_at_load_with_a_clear_message() -> None:
    with pytest.raises(ValidationError) as raised:
        ReflectionConfig(block_patterns=[r"password", r"api[_-key"])
    message = str(raised.value)
    assert "block_patterns[1] is not a valid regular expression" in message
    assert "'api[_-key'" in message
    assert "unterminated character set" in message
    with pytest.raises(ValidationError, match=r"block_patterns\[0\] is empty"):
        ReflectionConfig(block_patterns=[""])
    with pytest.raises(ValidationError, match="longer than 500"):
        ReflectionConfig(block_patterns=["a" * 501])


# --------------------------------------------------------------------------------------------
# Block patterns


def test_block_patterns_drop_matching_memories() -> None:
    config = ReflectionConfig(block_patterns=[r"\bpassword\b", r"(?i)ssn:\s*\d"])
    memories = [
        memory(1, "User's wifi password is hunter2", 0.9),
        memory(2, "User prefers window seats", 0.8),
        memory(3, "User's SSN: 123-45-6789", 0.7),
        # Patterns are case-sensitive unless they start with (?i), as in vLLM Semantic Router.
        memory(4, "User's PASSWORD manager is KeePass", 0.6),
    ]
    decisions = by_id(reflect(memories, config, now=NOW))
    assert decisions[1].reason == "blocked" and not decisions[1].kept
    assert decisions[3].reason == "blocked" and not decisions[3].kept
    assert decisions[2].kept and decisions[4].kept
    assert decisions[1].tokens == 0  # never sized


# --------------------------------------------------------------------------------------------
# Recency decay


def test_older_memory_with_the_same_score_ranks_lower() -> None:
    memories = [memory(1, "User lives in Lyon", 0.8, age=90), memory(2, "User likes tea", 0.8)]
    decisions = reflect(memories, ReflectionConfig(), now=NOW)
    assert [d.memory.id for d in decisions] == [2, 1]
    assert kept_ids(decisions) == [2, 1]
    assert decisions[0].adjusted_score > decisions[1].adjusted_score


def test_half_life_is_exact() -> None:
    config = ReflectionConfig(recency_half_life_days=30)
    memories = [
        memory(1, "one half-life", 0.8, age=30),
        memory(2, "two half-lives", 0.8, age=60),
        memory(3, "fresh", 0.8, age=0),
        memory(4, "ten days", 0.8, age=10),
    ]
    decisions = by_id(reflect(memories, config, now=NOW))
    assert decisions[1].adjusted_score == pytest.approx(0.4, rel=1e-12)
    assert decisions[2].adjusted_score == pytest.approx(0.2, rel=1e-12)
    assert decisions[3].adjusted_score == 0.8
    assert decisions[4].adjusted_score == pytest.approx(0.8 * 2 ** (-1 / 3), rel=1e-12)
    assert decayed(1.0, 7.0, 7.0) == 0.5
    assert decayed(0.6, 0.0, 30.0) == 0.6


def test_decay_can_outrank_a_higher_recall_score() -> None:
    memories = [memory(1, "old but relevant", 0.9, age=60), memory(2, "recent", 0.5, age=1)]
    decisions = reflect(memories, ReflectionConfig(), now=NOW)
    assert [d.memory.id for d in decisions] == [2, 1]


def test_vllm_semantic_routers_alias_drives_the_decay() -> None:
    config = ReflectionConfig(recency_decay_days=5)
    [decision] = reflect([memory(1, "x", 1.0, age=5)], config, now=NOW)
    assert decision.adjusted_score == pytest.approx(0.5)


def test_future_and_naive_timestamps() -> None:
    future = memory(1, "clock skew", 0.7, age=-3)
    naive = RecalledMemory(2, "naive", "fact", 0.7, (NOW - timedelta(days=30)).replace(tzinfo=None))
    decisions = by_id(reflect([future, naive], ReflectionConfig(), now=NOW))
    assert decisions[1].adjusted_score == 0.7  # never boosted above its score
    assert decisions[2].adjusted_score == pytest.approx(0.35)  # naive read as UTC
    assert age_days(NOW, NOW.replace(tzinfo=None)) == 0.0


def test_ties_keep_the_recall_order() -> None:
    memories = [memory(i, f"memory number {i}", 0.5) for i in (5, 3, 9)]
    assert [d.memory.id for d in reflect(memories, ReflectionConfig(), now=NOW)] == [5, 3, 9]


# --------------------------------------------------------------------------------------------
# Near-duplicate removal


def test_cosine_duplicates_of_a_kept_memory_are_dropped() -> None:
    memories = [
        memory(1, "User prefers aisle seats", 0.9, embedding=[1.0, 0.0, 0.0]),
        memory(2, "User likes the aisle seat", 0.8, embedding=[0.96, 0.28, 0.0]),  # cos 0.96
        memory(3, "User lives in Lyon", 0.7, embedding=[0.0, 1.0, 0.0]),
        memory(4, "User is vegetarian", 0.6, embedding=[0.8, 0.0, 0.6]),  # cos 0.8 with #1
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(), now=NOW))
    assert decisions[2].reason == "duplicate" and not decisions[2].kept
    assert decisions[1].kept and decisions[3].kept and decisions[4].kept


def test_the_threshold_is_inclusive_and_configurable() -> None:
    memories = [
        memory(1, "a", 0.9, embedding=[1.0, 0.0]),
        memory(2, "b", 0.8, embedding=[0.6, 0.8]),  # cosine exactly 0.6
    ]
    assert cosine([1.0, 0.0], [0.6, 0.8]) == 0.6
    at = by_id(reflect(memories, ReflectionConfig(dedup_threshold=0.6), now=NOW))
    assert at[2].reason == "duplicate"
    above = by_id(reflect(memories, ReflectionConfig(dedup_threshold=0.61), now=NOW))
    assert above[2].kept


def test_the_higher_adjusted_score_wins_the_duplicate() -> None:
    memories = [
        memory(1, "User lives in Lyon", 0.9, age=120, embedding=[1.0, 0.0]),
        memory(2, "User lives in Lyon, France", 0.7, age=0, embedding=[0.99, 0.141]),
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(), now=NOW))
    assert decisions[2].kept
    assert decisions[1].reason == "duplicate"


def test_text_fallback_when_embeddings_are_missing() -> None:
    memories = [
        memory(1, "User likes green tea.", 0.9),
        memory(2, "  user LIKES green-tea ", 0.8),  # same after normalisation
        memory(3, "User likes black tea", 0.7),
        memory(4, "User likes green tea", 0.6, embedding=[1.0, 0.0]),  # one side missing
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(), now=NOW))
    assert decisions[1].kept
    assert decisions[2].reason == "duplicate"
    assert decisions[3].kept
    assert decisions[4].reason == "duplicate"


def test_text_fallback_when_embeddings_differ_in_dimension() -> None:
    memories = [
        memory(1, "User likes tea", 0.9, embedding=[1.0, 0.0]),
        memory(2, "user likes tea.", 0.8, embedding=[0.0, 0.0, 1.0]),  # another embedder
        memory(3, "User hates tea", 0.7, embedding=[1.0, 0.0, 0.0]),
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(), now=NOW))
    assert decisions[2].reason == "duplicate"  # the texts decide
    assert decisions[3].kept


def test_similarity_helper() -> None:
    assert similarity("x", [1.0, 0.0], "y", [0.0, 1.0]) == 0.0
    assert similarity("Hello, World", None, "hello world", None) == 1.0
    assert similarity("hello", [], "hello there", []) == 0.0
    assert normalise_text("\uff35ser's  NAME—is Ada!") == "user s name is ada"
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match="dimension"):
        cosine([1.0], [1.0, 0.0])


def test_a_duplicate_of_a_blocked_memory_is_not_a_duplicate() -> None:
    config = ReflectionConfig(block_patterns=["hunter2"])
    memories = [
        memory(1, "User's password is hunter2", 0.9, embedding=[1.0, 0.0]),
        memory(2, "User's password is set", 0.8, embedding=[1.0, 0.0]),
    ]
    decisions = by_id(reflect(memories, config, now=NOW))
    assert decisions[1].reason == "blocked"
    assert decisions[2].kept


# --------------------------------------------------------------------------------------------
# The token budget


def test_estimate_is_script_aware_and_rounded_up() -> None:
    estimator = ReflectionEstimator()
    assert estimator.count("one two three") == 4  # ceil(3 · 1.3 = 3.9)
    assert estimator.count("我喜欢喝绿茶") == 9  # 6 Han · 1.5
    assert estimator.count("東京 Tokyo") == 5  # ceil(2 · 1.5 + 1 · 1.3 = 4.3)
    assert estimator.count("ひらがな カタカナ 한국어") == 17  # 11 characters · 1.5 = 16.5


def test_budget_keeps_in_order_and_a_smaller_later_memory_may_still_fit() -> None:
    memories = [
        memory(1, "one two three four five", 0.9),  # ceil(6.5) = 7
        memory(2, " ".join(["word"] * 10), 0.8),  # 13
        memory(3, "one two", 0.7),  # ceil(2.6) = 3
        memory(4, "x", 0.6),  # ceil(1.3) = 2
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(max_inject_tokens=10), now=NOW))
    assert decisions[1].kept and decisions[1].tokens == 7
    assert decisions[2].reason == "over_budget" and decisions[2].tokens == 13
    assert decisions[3].kept and decisions[3].tokens == 3  # 7 + 3 = 10: the budget is inclusive
    assert decisions[4].reason == "over_budget"  # nothing left


def test_budget_counts_cjk_at_one_and_a_half_tokens_per_character() -> None:
    memories = [
        memory(1, "用户喜欢喝绿茶", 0.9),  # 7 Han → ceil(10.5) = 11
        memory(2, "ユーザーは東京に住んでいる", 0.8),  # 13 kana/Han → ceil(19.5) = 20
        memory(3, "사용자는 채식주의자", 0.7),  # 9 Hangul → ceil(13.5) = 14
        memory(4, "User likes tea", 0.6),  # ceil(3.9) = 4
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(max_inject_tokens=30), now=NOW))
    assert [decisions[i].tokens for i in (1, 2, 3, 4)] == [11, 20, 14, 4]
    assert decisions[1].kept and decisions[3].kept and decisions[4].kept  # 11 + 14 + 4 = 29
    assert decisions[2].reason == "over_budget"  # 11 + 20 = 31
    # A byte-based estimate would count the Korean memory at (28 + 3) // 4 = 7: the gate does not.
    assert len("사용자는 채식주의자".encode()) == 28


def test_a_memory_larger_than_the_whole_budget_is_skipped_even_first() -> None:
    memories = [memory(1, " ".join(["long"] * 100), 0.99), memory(2, "short one", 0.1)]
    decisions = by_id(reflect(memories, ReflectionConfig(max_inject_tokens=50), now=NOW))
    assert decisions[1].reason == "over_budget"
    assert decisions[2].kept


def test_duplicates_do_not_spend_the_budget() -> None:
    memories = [
        memory(1, "User likes tea", 0.9),  # 4 tokens
        memory(2, "user likes tea", 0.8),  # duplicate
        memory(3, "User hates coffee", 0.7),  # 4 tokens
    ]
    decisions = by_id(reflect(memories, ReflectionConfig(max_inject_tokens=8), now=NOW))
    assert decisions[2].reason == "duplicate"
    assert decisions[3].kept


# --------------------------------------------------------------------------------------------
# The whole gate


def test_all_steps_together() -> None:
    config = ReflectionConfig(
        max_inject_tokens=12, recency_half_life_days=10, block_patterns=[r"(?i)credit card"]
    )
    memories = [
        memory(1, "User's credit card ends in 4242", 0.99),
        memory(2, "User prefers window seats", 0.9, age=10, embedding=[1.0, 0.0]),  # 0.45
        memory(3, "User likes window seats", 0.6, embedding=[0.995, 0.0998]),  # 0.6, keeps
        memory(4, "User lives in Lyon", 0.5, embedding=[0.0, 1.0]),  # 0.5
        memory(5, "User is a nurse who works nights in Lyon", 0.4, embedding=[0.5, 0.5]),
    ]
    decisions = reflect(memories, config, now=NOW)
    assert [d.memory.id for d in decisions] == [1, 3, 4, 2, 5]
    assert [d.reason for d in decisions] == ["blocked", "kept", "kept", "duplicate", "over_budget"]
    assert kept_ids(decisions) == [3, 4]


def test_disabled_gate_keeps_everything_in_score_order() -> None:
    config = ReflectionConfig(enabled=False, max_inject_tokens=1, block_patterns=["secret"])
    memories = [
        memory(1, "a secret", 0.2, age=0),
        memory(2, "same text", 0.9, age=300),
        memory(3, "same text", 0.5),
    ]
    decisions = reflect(memories, config, now=NOW)
    assert [d.memory.id for d in decisions] == [2, 3, 1]
    assert all(d.kept and d.reason == "kept" for d in decisions)
    assert [d.adjusted_score for d in decisions] == [0.9, 0.5, 0.2]


def test_nothing_in_nothing_out() -> None:
    assert reflect([], ReflectionConfig(), now=NOW) == []
    assert reflect([], ReflectionConfig(enabled=False), now=NOW) == []


def test_reflect_is_pure() -> None:
    memories = [memory(i, f"memory {i} " * i, 1.0 / i, age=i) for i in range(1, 8)]
    config = ReflectionConfig(max_inject_tokens=20)
    first = reflect(memories, config, now=NOW)
    assert reflect(list(memories), config, now=NOW) == first
    assert all(math.isfinite(d.adjusted_score) for d in first)


# --------------------------------------------------------------------------------------------
# The date a memory was said


def test_the_injected_text_carries_the_day_the_user_said_it() -> None:
    said = datetime(2025, 3, 14, 23, 30, tzinfo=UTC)
    dated = RecalledMemory(1, "User moved to Lisbon", "event", 0.8, NOW, observed_at=said)
    assert injected_text(dated) == "(2025-03-14) User moved to Lisbon"
    # the day in UTC, whatever the offset it was given in; a naive one is read as UTC
    east = said.astimezone(timezone(timedelta(hours=5)))  # 2025-03-15 04:30 there
    assert injected_text(RecalledMemory(1, "x", "fact", 0.8, NOW, observed_at=east)) == (
        "(2025-03-14) x"
    )
    naive = RecalledMemory(1, "x", "fact", 0.8, NOW, observed_at=said.replace(tzinfo=None))
    assert injected_text(naive) == "(2025-03-14) x"
    assert injected_text(memory(2, "User likes tea")) == "User likes tea"  # no date known


def test_the_budget_counts_the_date_with_the_memory() -> None:
    said = datetime(2025, 3, 14, tzinfo=UTC)
    text = "User moved to Lisbon"
    undated = reflect([memory(1, text)], ReflectionConfig(max_inject_tokens=6), now=NOW)
    dated_memory = RecalledMemory(1, text, "event", 0.8, NOW, observed_at=said)
    dated = reflect([dated_memory], ReflectionConfig(max_inject_tokens=6), now=NOW)
    assert (undated[0].kept, undated[0].tokens) == (True, 6)
    assert (dated[0].reason, dated[0].tokens) == ("over_budget", 7)  # what is injected is sized
