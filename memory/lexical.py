"""The text side of the hybrid recall, the parts that touch no database (pure).

A question's frame ("When did ...", "Would ... likely ...", "What kinds of ...") says what is asked,
not what about: the words of the frame that the text configuration keeps (it drops "when" and
"did", not "would", "likely" or "kinds") are taken out of the text query, since a memory holding
them is no likelier to answer. Each remaining word counts by its inverse document frequency among
the user's memories (BM25's), so a word most memories hold, such as the name of the speaker who
says half of a conversation, weighs little beside the rare word that names the event; PostgreSQL's
own ``ts_rank_cd`` has no such weight and ranks a memory holding only the common word as high.
"""

from __future__ import annotations

import math
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


def idf(memories: int, holding: int) -> float:
    """BM25's inverse document frequency of a word ``holding`` of ``memories`` memories hold:
    always positive, highest for the rarest."""
    return math.log(1.0 + (memories - holding + 0.5) / (holding + 0.5))


# What a memory says a time with, asked for by a question about when something happened: the
# memory that tells the event and when it was ("I went to a support group yesterday") answers it,
# the friend's reply in the same words ("A support group? Proud of you!") does not.
TIME_WORDS = (
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "ago",
    "last",
    "weekend",
    "morning",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
WHEN_ASKED = re.compile(r"^\s*(when|what (date|day|time|year|month)|how long ago)\b", re.IGNORECASE)


def asks_when(query: str) -> bool:
    """Whether the question asks when something happened."""
    return WHEN_ASKED.search(query) is not None
