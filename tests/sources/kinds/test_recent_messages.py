"""The recent_messages source's pure parts: the compacted digest and first sentences."""

from __future__ import annotations

import re

import pytest

from contextplatform.core.estimation import default_estimator
from sources.base import ChatTurn
from sources.kinds.recent_messages import compact_digest, first_sentence, render_turns

estimator = default_estimator()
OMITTED = re.compile(r"^- \((\d+) earlier messages omitted\)$")


def conversation(count: int) -> list[ChatTurn]:
    return [
        ChatTurn(
            role="user" if n % 2 == 0 else "assistant",
            text=f"Message number {n} is about topic {n}. It has a second sentence that is dropped.",
        )
        for n in range(count)
    ]


def digest_lines(digest: str) -> tuple[str, int, list[str]]:
    """(header, omitted count, turn lines) of a digest."""
    header, *rest = digest.split("\n")
    omitted = 0
    if rest and (match := OMITTED.match(rest[0])):
        omitted = int(match.group(1))
        rest = rest[1:]
    return header, omitted, rest


# --- first_sentence ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "max_words", "expected"),
    [
        ("Hello world. Second sentence.", 24, "Hello world."),
        ("Is it done? Yes it is.", 24, "Is it done?"),
        ("Wow! That worked.", 24, "Wow!"),
        ("No terminal punctuation here", 24, "No terminal punctuation here"),
        ("Pi is 3.14 exactly. Next.", 24, "Pi is 3.14 exactly."),
        ("  Spread \n over\n\n lines.   Then more.", 24, "Spread over lines."),
        ("one two three four five", 3, "one two three …"),
        ("one two three. four", 3, "one two three."),
        ("one two three four. five", 3, "one two three …"),
        ("", 5, ""),
        ("   ", 5, ""),
    ],
)
def test_first_sentence(text: str, max_words: int, expected: str) -> None:
    assert first_sentence(text, max_words) == expected


# --- compact_digest ---------------------------------------------------------------------------


def test_digest_of_turns_that_all_fit() -> None:
    turns = [
        ChatTurn(role="user", text="My order is late. It was due Monday."),
        ChatTurn(role="assistant", text="Sorry about that! Let me check."),
        ChatTurn(role="user", text="Thanks"),
    ]
    digest = compact_digest(turns, max_tokens=300, words_per_turn=24)
    assert digest == (
        "Earlier in this session (3 older messages, compacted):\n"
        "- user: My order is late.\n"
        "- assistant: Sorry about that!\n"
        "- user: Thanks"
    )


def test_digest_is_deterministic() -> None:
    turns = conversation(30)
    first = compact_digest(turns, max_tokens=120, words_per_turn=8)
    assert first == compact_digest(list(turns), max_tokens=120, words_per_turn=8)
    assert first == compact_digest(conversation(30), max_tokens=120, words_per_turn=8)


def test_digest_truncates_each_turn_to_words_per_turn() -> None:
    turns = [ChatTurn(role="user", text="one two three four five six seven eight. nine")]
    digest = compact_digest(turns, max_tokens=300, words_per_turn=4)
    assert digest.split("\n")[1] == "- user: one two three four …"


@pytest.mark.parametrize("max_tokens", [16, 20, 25, 30, 40, 60, 100, 150, 300, 1000])
@pytest.mark.parametrize("count", [1, 2, 5, 12, 40])
def test_digest_respects_max_tokens(max_tokens: int, count: int) -> None:
    digest = compact_digest(conversation(count), max_tokens=max_tokens, words_per_turn=24)
    assert estimator.count(digest) <= max_tokens
    header, _, lines = digest_lines(digest)
    assert header == f"Earlier in this session ({count} older messages, compacted):"
    assert len(lines) <= count


@pytest.mark.parametrize("max_tokens", [16, 24, 48, 96, 200])
def test_digest_respects_max_tokens_for_cjk_and_blobs(max_tokens: int) -> None:
    turns = [
        ChatTurn(role="user", text="注文した商品がまだ届きません。確認してください。" * 3),
        ChatTurn(role="assistant", text='{"order":42,"status":"shipped","eta":"2025-06-01"}' * 4),
        ChatTurn(role="user", text="배송 상태를 알려주세요. 감사합니다."),
        ChatTurn(role="assistant", text="🎉" * 60),
    ] * 3
    digest = compact_digest(turns, max_tokens=max_tokens, words_per_turn=24)
    assert estimator.count(digest) <= max_tokens


def test_digest_keeps_the_newest_older_turns_when_over_budget() -> None:
    turns = conversation(12)
    digest = compact_digest(turns, max_tokens=80, words_per_turn=24)
    _, omitted, lines = digest_lines(digest)
    kept = len(lines)
    assert 0 < kept < 12
    # The kept lines are the newest turns, oldest first.
    expected = [f"- {t.role}: {first_sentence(t.text, 24)}" for t in turns[-kept:]]
    assert lines == expected
    assert lines[-1] == "- assistant: Message number 11 is about topic 11."
    assert omitted == 12 - kept


def test_digest_notes_the_omitted_count_right_after_the_header() -> None:
    digest = compact_digest(conversation(12), max_tokens=60, words_per_turn=24)
    lines = digest.split("\n")
    assert lines[0] == "Earlier in this session (12 older messages, compacted):"
    match = OMITTED.match(lines[1])
    assert match is not None
    assert int(match.group(1)) == 12 - (len(lines) - 2)
    assert len(lines) > 2  # at least one turn survives


def test_digest_has_no_omitted_note_when_everything_fits() -> None:
    digest = compact_digest(conversation(4), max_tokens=1000, words_per_turn=24)
    assert "omitted" not in digest
    assert len(digest.split("\n")) == 5


def test_a_bigger_budget_keeps_at_least_as_many_turns() -> None:
    turns = conversation(20)
    kept = [
        len(digest_lines(compact_digest(turns, max_tokens=budget, words_per_turn=24))[2])
        for budget in range(16, 400, 8)
    ]
    assert kept == sorted(kept)
    assert kept[0] == 0
    assert kept[-1] == 20


def test_render_turns() -> None:
    turns = [
        ChatTurn(role="user", text="Hi"),
        ChatTurn(role="assistant", text="Hello.\nHow can I help?"),
    ]
    assert render_turns(turns) == "user: Hi\nassistant: Hello.\nHow can I help?"
