"""The hybrid recall's text side on PostgreSQL and its fusion: a question's frame words are no
match, a word most memories hold weighs less than a rare one, and each side's best candidate is
not outranked by one both sides rank in the middle."""

from __future__ import annotations

import pytest
from django_tenants.utils import schema_context

from memory.fusion import fuse_ranks
from memory.lexical import content_words, idf
from memory.stores.postgres import PostgresMemoryStore
from tests.conftest import TenantFixture
from tests.memory.test_memory_isolation import axis, remember


def test_content_words_drop_the_question_frame() -> None:
    assert content_words("Would Caroline likely enjoy a ceramics course?") == [
        "caroline",
        "enjoy",
        "a",
        "ceramics",
        "course",
    ]
    assert content_words("When did Caroline go to the support group? When!") == [
        "caroline",
        "go",
        "to",
        "the",
        "support",
        "group",
    ]
    assert content_words("What kinds of art has she done?") == ["of", "art", "she", "done"]


def test_idf_weighs_the_rare_word_above_the_common_one() -> None:
    assert idf(100, 1) > idf(100, 10) > idf(100, 90) > 0.0


def test_a_rare_word_outranks_a_common_name_held_twice(acme: TenantFixture) -> None:
    # The speaker's name and "go" are in nearly every memory; "pottery" in one. Ranked by
    # ts_rank_cd alone, two common words (one of them twice) beat the one rare word.
    for i in range(8):
        remember(acme.schema, "u1", f"Caroline: going to go shopping, number {i}", axis(2))
    remember(acme.schema, "u1", "Melanie: the pottery was lovely", axis(3))
    remember(acme.schema, "u1", "Caroline: it rained all day", axis(4))
    with schema_context(acme.schema):
        hits = PostgresMemoryStore().recall(
            "u1", "When did Caroline go to the pottery workshop?", axis(0), 3, mode="lexical"
        )
    assert hits[0].content == "Melanie: the pottery was lovely"
    assert hits[0].lexical is not None and hits[0].lexical > (hits[1].lexical or 0.0) > 0.0


def test_the_question_frame_matches_no_memory(acme: TenantFixture) -> None:
    remember(acme.schema, "u1", "I would likely say yes to that kind of thing", axis(2))
    remember(acme.schema, "u1", "it is going to rain all weekend", axis(3))
    with schema_context(acme.schema):
        hits = PostgresMemoryStore().recall(
            "u1", "Would it likely rain? What kind?", axis(0), 5, mode="lexical"
        )
        nothing = PostgresMemoryStore().recall("u1", "Would it?", axis(0), 5, mode="lexical")
    assert [h.content for h in hits] == ["it is going to rain all weekend"]
    assert nothing == []


def test_each_sides_best_outranks_a_memory_both_rank_in_the_middle() -> None:
    # Memory 1 is the embedding's first and the text's none; memory 2 is 15th on both sides.
    dense = [(1, 0.9)] + [(100 + i, 0.8 - i * 0.01) for i in range(13)] + [(2, 0.6)]
    lexical = [(200 + i, None, 5.0 - i * 0.1) for i in range(14)] + [(2, None, 3.0)]
    fused = fuse_ranks(dense, lexical, min_similarity=-1.0)
    assert fused[0].id == 1
    assert fused[0].score == pytest.approx(1 / 11)
    # Each side's first two, then the memory both rank 15th (at k 60 it would come first).
    assert [f.id for f in fused[:5]] == [1, 200, 100, 201, 2]
