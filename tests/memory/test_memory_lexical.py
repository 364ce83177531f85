"""The hybrid recall's text side on PostgreSQL and its fusion: a question's frame words are no
match, and each side's best candidate is not outranked by one both sides rank in the middle."""

from __future__ import annotations

import pytest
from django_tenants.utils import schema_context

from memory.fusion import fuse_ranks
from memory.lexical import content_words
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
