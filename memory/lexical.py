"""The text side of the hybrid recall, the parts that touch no database (pure).

A question's frame ("When did ...", "Would ... likely ...", "What kinds of ...") says what is asked,
not what about: the words of the frame that the text configuration keeps (it drops "when" and
"did", not "would", "likely" or "kinds") are taken out of the text query, since a memory holding
them is no likelier to answer.
"""

from __future__ import annotations

import re

WORD = re.compile(r"\w+", re.UNICODE)
QUESTION_WORDS = frozenset(
    {
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "would",
        "could",
        "should",
        "can",
        "will",
        "might",
        "may",
        "likely",
        "kind",
        "kinds",
        "sort",
        "sorts",
        "type",
        "types",
        "ever",
        "any",
        "or",
    }
)


def content_words(query: str) -> list[str]:
    """The query's words, lower-cased, without its question frame (order kept, repeats dropped)."""
    seen: dict[str, None] = {}
    for word in WORD.findall(query.lower().replace("_", " ")):
        if word not in QUESTION_WORDS:
            seen.setdefault(word)
    return list(seen)
