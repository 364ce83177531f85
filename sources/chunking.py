"""Split a document into chunks of whole sentences, about 200 words each, with overlap."""

from __future__ import annotations

import re
from dataclasses import dataclass

SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*|\n\s*\n")


@dataclass(frozen=True)
class TextChunk:
    ordinal: int
    text: str
    words: int


def sentences(text: str) -> list[str]:
    return [part.strip() for part in SENTENCE_BOUNDARY.split(text) if part and part.strip()]


def split_long(sentence: str, max_words: int) -> list[str]:
    words = sentence.split()
    return [" ".join(words[start : start + max_words]) for start in range(0, len(words), max_words)]


def chunk_text(text: str, *, target_words: int = 200, overlap_words: int = 40) -> list[TextChunk]:
    """Greedy sentence packing up to ``target_words``; each chunk after the first starts with the
    last sentences (up to ``overlap_words``) of the one before, so no fact is cut off at a border.
    A sentence longer than the target is split by words."""
    units: list[str] = []
    for sentence in sentences(text):
        units.extend(
            split_long(sentence, target_words)
            if len(sentence.split()) > target_words
            else [sentence]
        )
    chunks: list[list[str]] = []
    current: list[str] = []
    count = 0
    for unit in units:
        size = len(unit.split())
        if current and count + size > target_words:
            chunks.append(current)
            current = overlap_tail(current, overlap_words)
            count = sum(len(s.split()) for s in current)
            if count + size > target_words:
                current, count = [], 0
        current.append(unit)
        count += size
    if current and (not chunks or current != overlap_tail(chunks[-1], overlap_words)):
        chunks.append(current)
    return [
        TextChunk(ordinal=index, text=" ".join(parts), words=sum(len(p.split()) for p in parts))
        for index, parts in enumerate(chunks)
    ]


def overlap_tail(parts: list[str], overlap_words: int) -> list[str]:
    tail: list[str] = []
    count = 0
    for part in reversed(parts):
        size = len(part.split())
        if count + size > overlap_words:
            break
        tail.insert(0, part)
        count += size
    return tail
