"""Text-level compression: extractive (plain text and JSON string leaves) and middle truncation.

Pure functions; deterministic; an applied result never counts more tokens than its input or its
target, and an input that cannot be shrunk comes back as it was (``applied=False``).

* ``compress_extractive`` is vLLM Semantic Router's ``CompressToolOutput``: lines
  become chunks, BM25 against the query plus a boundary bonus ranks them, and the best chunk, the
  first, the last and then the rest by score are kept while the joined result fits the target.
  One decision of ours: a line cut into pieces for its size is kept whole when it fits (its pieces
  joined by a space again), so the piece with the query's terms does not lose the rest of its line.
  JSON objects and arrays only lose text inside their string leaves (key order, duplicate keys,
  array lengths and the exact text of numbers are kept; the leaf holding the document's
  best-matching line gets room for that line before the leaves share the rest by size), a JSON
  string document is decoded, compressed and re-encoded, and text that starts like JSON but does
  not parse is left alone.
* ``truncate_middle`` keeps the beginning and the end of a text, as vLLM Semantic Router does.
* ``tokenize_terms`` and ``bm25_scores`` (the shared ``contextplatform.core.bm25`` on these
  terms) are the ranking helpers the engine uses.

Every count goes through the estimator passed in. For ``HeuristicEstimator`` the counts of joined
chunks are computed from per-chunk sums instead of re-counting each candidate text; they are exactly
the estimator's counts (the tests compare both paths), just linear instead of quadratic.

The extractive path runs at the speed of its algorithm (issue 15): what it does per line or per
chunk over a long tool output is done in bulk with numpy, with the same results to the bit (each
bulk step is pinned to the one-at-a-time code it replaced in ``tests/compression``). A text's lines
are measured once over their bytes (its own count is their sum); the ASCII chunks' terms are
counted, not collected, over their joined bytes (``chunk_term_counts``) and scored from the counts
(``bm25.scores_from_counts``); the selection skips the chunks that cannot fit, a window of the
ranking at a time.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import unicodedata
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from contextplatform.core import bm25
from contextplatform.core.estimation import (
    CJK_CHAR,
    CJK_FREE_FIELD,
    CJK_RANGES,
    HeuristicEstimator,
    TokenEstimator,
    cjk_and_words,
    script_tokens,
)

OMISSION_MARKER = "[... context omitted by route compression ...]"
# How the marker sits between two kept chunks (and in ``truncate_middle``): on a line of its own,
# with a blank line either side once the chunks are joined by "\n".
GAP = f"\n{OMISSION_MARKER}\n"

BOUNDARY_BONUS = 0.35
# The compression stage's BM25 floors the average document length at one term, so chunks or blocks
# that are mostly empty of terms do not inflate the length penalty of the rest.
AVERAGE_LENGTH_FLOOR = 1.0
# vLLM Semantic Router tries 3 times; whole chunks move in steps, so a few more tries reach the
# target.
JSON_ATTEMPTS = 6


@dataclass(frozen=True)
class TextResult:
    text: str  # the input itself when nothing could be done
    applied: bool
    # "json" when the input is a JSON document (object, array, string or other scalar), applied or
    # not, so a caller knows not to append text to it; "text" otherwise, including text that
    # starts like JSON but does not parse.
    format: Literal["text", "json"]
    omitted_chunks: int
    tokens_before: int
    tokens_after: int


# --- public API -----------------------------------------------------------------------------------


def compress_extractive(
    text: str, query: str, target_tokens: int, estimator: TokenEstimator
) -> TextResult:
    """Text by its chunks; JSON objects and arrays by their string leaves only, a JSON string
    document by its inner text; text that starts like JSON but is not valid JSON is left unchanged,
    and so is any other JSON scalar."""
    if not _utf8(text):
        return _unchanged_unencodable(text, estimator)
    meter = _meter(estimator)
    original = meter.count(text)
    kind, value = _json_kind(text)
    fmt: Literal["text", "json"] = "json" if kind in ("container", "string", "scalar") else "text"
    if target_tokens <= 0 or target_tokens >= original or kind in ("malformed", "scalar"):
        return _unchanged(text, original, fmt)
    if kind == "container":
        result = _compress_json(value, query, original, target_tokens, meter)
    elif kind == "string":
        result = _compress_json_string(value, query, original, target_tokens, meter)
    else:
        result = _compress_text(text, query, original, target_tokens, meter)
    return result or _unchanged(text, original, fmt)


def truncate_middle(text: str, target_tokens: int, estimator: TokenEstimator) -> TextResult:
    """Keep the beginning and the end, ``OMISSION_MARKER`` on its own line between them.

    Binary search over the number of kept code points (2 … n-1): the head gets ``(keep + 1) // 2``,
    the tail the rest, and the largest candidate that fits the target wins. Nothing fits → unchanged.
    Python strings index code points, so no code point is ever cut (grapheme clusters may be)."""
    if not _utf8(text):
        return _unchanged_unencodable(text, estimator)
    original = estimator.count(text)
    if original <= target_tokens:
        return _unchanged(text, original, "text")
    best: str | None = None
    best_tokens = 0
    low, high = 2, len(text) - 1
    while low <= high:
        keep = (low + high) // 2
        candidate = _head_and_tail(text, keep)
        tokens = estimator.count(candidate)
        if tokens <= target_tokens:
            best, best_tokens, low = candidate, tokens, keep + 1
        else:
            high = keep - 1
    if best is None:
        return _unchanged(text, original, "text")
    return TextResult(best, True, "text", 1, original, best_tokens)


def tokenize_terms(text: str) -> list[str]:
    """The BM25 term tokenizer of vLLM Semantic Router (``tokenizeTerms``): lower-cased words of
    letters, digits and ``_`` (one-character words dropped), every CJK character plus the bigram of
    consecutive CJK characters, and every Unicode symbol as a term of its own; everything else
    separates.

    The terms are a bag: BM25 only counts them, so words, CJK terms and symbols
    come out in separate groups, not in text order."""
    return _term_tokenizer().terms(text)


def bm25_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 (``contextplatform.core.bm25``) of each text against the query, the texts being the
    whole document collection, on ``tokenize_terms``."""
    return chunk_scores(tokenize_terms(query), [tokenize_terms(text) for text in texts])


def chunk_scores(query_terms: list[str], documents: Sequence[Sequence[str]]) -> list[float]:
    """BM25 as the compression stage ranks: the average length is floored at one term."""
    return bm25.bm25_scores(query_terms, documents, average_length_floor=AVERAGE_LENGTH_FLOOR)


# --- shared helpers -------------------------------------------------------------------------------


def _unchanged(text: str, tokens: int, fmt: Literal["text", "json"]) -> TextResult:
    return TextResult(text, False, fmt, 0, tokens, tokens)


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, e.g. decoded from a JSON "\ud800" escape
        return False
    return True


def _unchanged_unencodable(text: str, estimator: TokenEstimator) -> TextResult:
    # Estimators count UTF-8 bytes; count the text as a JSON encoder would send it.
    tokens = estimator.count(json.dumps(text)[1:-1])
    return _unchanged(text, tokens, "text")


def _head_and_tail(text: str, keep: int) -> str:
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + GAP + text[len(text) - tail :]


# --- term tokenizer -------------------------------------------------------------------------------


def _char_class(code_points: list[int]) -> str:
    """A regex character class body for the given sorted code points, as ranges."""
    parts: list[str] = []
    start = previous = code_points[0]
    for point in [*code_points[1:], -1]:
        if point == previous + 1:
            previous = point
            continue
        parts.append(
            re.escape(chr(start))
            if start == previous
            else f"{re.escape(chr(start))}-{re.escape(chr(previous))}"
        )
        start = previous = point
    return "".join(parts)


ASTRAL = "\U00010000-\U0010ffff"


class _TermTokenizer:
    """``tokenize_terms`` in a few C-level regex passes.

    re has no \\p{S}, and its \\w also takes the letter-like numbers (Nl, No: "²", "Ⅻ") that Go's
    IsLetter/IsDigit reject, so both sets come from the Unicode database (planes 2 and up hold
    neither). Classes with ranges above U+FFFF are matched range by range, which is slow: the
    passes run over the whole text use classes of BMP characters plus the astral plane as a single
    range, and the rare astral hits are checked afterwards."""

    ASCII_TERMS = re.compile(r"[a-z0-9_]{2,}|[$+<=>^`|~]")  # the ASCII symbols: Sc, Sk, Sm
    WORDS = re.compile(r"\w\w+")
    CJK_RUNS = re.compile(f"[{CJK_RANGES}]+")

    def __init__(self) -> None:
        numbers: list[int] = []
        symbols: list[int] = []
        for point in range(min(sys.maxunicode + 1, 0x20000)):
            category = unicodedata.category(chr(point))
            if category in ("Nl", "No"):
                numbers.append(point)
            elif category[0] == "S":
                symbols.append(point)
        cjk_bmp = CJK_RANGES.replace("\U00020000-\U0002ebef", "")
        assert "\U00020000-\U0002ebef" in CJK_RANGES  # the one astral range, handled via ASTRAL
        numbers_bmp = _char_class([point for point in numbers if point < 0x10000])
        # Characters that end a \\w run in Go but not in re: CJK and Nl/No (or an astral character).
        self.word_breaks = re.compile(f"[{cjk_bmp}{numbers_bmp}{ASTRAL}]")
        self.word_breaks_exact = re.compile(f"[{CJK_RANGES}{_char_class(numbers)}]+")
        self.symbols = re.compile(
            f"[{_char_class([point for point in symbols if point < 0x10000])}{ASTRAL}]"
        )
        self.astral_symbols = frozenset(chr(point) for point in symbols if point >= 0x10000)

    def terms(self, text: str) -> list[str]:
        if text.isascii():
            return self.ASCII_TERMS.findall(text.lower())
        # Go lower-cases rune by rune with the simple mapping: no "i" + combining dot for "İ", no
        # word-final sigma.
        lower = text.replace("\u0130", "i").replace("\u03a3", "\u03c3").lower()
        return [*self._words(lower), *self._cjk(lower), *self._symbols(lower)]

    def _words(self, lower: str) -> list[str]:
        words = self.WORDS.findall(lower)
        if not self.word_breaks.search(lower):
            return words
        kept: list[str] = []
        for word in words:
            if word.isascii():
                kept.append(word)
            else:
                kept.extend(piece for piece in self.word_breaks_exact.split(word) if len(piece) > 1)
        return kept

    def _cjk(self, lower: str) -> list[str]:
        terms: list[str] = []
        for run in self.CJK_RUNS.findall(lower):
            terms.append(run[0])
            for index in range(1, len(run)):
                terms.append(run[index])
                terms.append(run[index - 1 : index + 1])
        return terms

    def _symbols(self, lower: str) -> list[str]:
        return [
            char
            for char in self.symbols.findall(lower)
            if char < "\U00010000" or char in self.astral_symbols
        ]


@functools.cache
def _term_tokenizer() -> _TermTokenizer:
    return _TermTokenizer()


# --- term counts ----------------------------------------------------------------------------------
#
# BM25 needs, of each chunk, how many terms it holds and how often each query term occurs in it, not
# the terms themselves. Tool outputs are nearly all ASCII, and an ASCII chunk's terms are simple:
# maximal runs of two or more ``[a-z0-9_]`` bytes once lower-cased, and each ASCII symbol byte. So
# the ASCII chunks are counted together, joined by newlines (which are neither), in a few numpy
# passes over their bytes; the others go through ``tokenize_terms``.

Counts = npt.NDArray[np.int64]

_NEWLINE = ord("\n")


def _byte_flags(members: bytes) -> bytes:
    """A ``bytes.translate`` table: 1 for ``members``, 0 for every other byte. Translating is one C
    pass over the bytes, several times faster than a numpy lookup."""
    return bytes(1 if byte in members else 0 for byte in range(256))


_WORD_FLAGS = _byte_flags(b"abcdefghijklmnopqrstuvwxyz0123456789_")
_SYMBOL_FLAGS = _byte_flags(b"$+<=>^`|~")  # the ASCII symbols: Sc, Sk, Sm (ASCII_TERMS)
# What ``str.split()`` splits an ASCII text at.
_FIELD_FLAGS = bytes(1 - flag for flag in _byte_flags(b" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"))


def _runs(data: bytes, flags: bytes) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Where each run of ``flags`` bytes of ``data`` starts, and where it stops (exclusive)."""
    padded = np.frombuffer(b"\0" + data.translate(flags) + b"\0", dtype=np.uint8)
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return edges[0::2], edges[1::2]


def _per_text(positions: npt.NDArray[np.intp], breaks: npt.NDArray[np.intp]) -> Counts:
    """How many of the (sorted) ``positions`` fall in each newline-separated text: those before
    each newline, less those before the newline before it."""
    return np.diff(np.searchsorted(positions, breaks), prepend=0, append=len(positions))


def chunk_term_counts(query_terms: Sequence[str], texts: Sequence[str]) -> tuple[Counts, Counts]:
    """``tokenize_terms`` of each text, counted as ``bm25.scores_from_counts`` takes them: the
    frequency of each distinct query term (in the query's order) in each text, and each text's
    number of terms."""
    query = list(dict.fromkeys(query_terms))
    simple = list(map(str.isascii, texts))
    if all(simple):  # the common case: no other text, nothing to place
        counted = _ascii_term_counts(query, list(texts))
        if counted is not None:
            return counted
    frequencies = np.zeros((len(query), len(texts)), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    ascii_texts = [index for index, flag in enumerate(simple) if flag]
    counted = _ascii_term_counts(query, [texts[index] for index in ascii_texts])
    if counted is None:  # a text holding newlines (never a chunk): those go to the tokenizer
        simple = [flag and "\n" not in text for flag, text in zip(simple, texts, strict=True)]
        ascii_texts = [index for index, flag in enumerate(simple) if flag]
        counted = _ascii_term_counts(query, [texts[index] for index in ascii_texts])
    if counted is not None and ascii_texts:
        columns = np.array(ascii_texts, dtype=np.intp)
        frequencies[:, columns], lengths[columns] = counted
    tokenize = _term_tokenizer().terms
    for index in (index for index, flag in enumerate(simple) if not flag):
        terms = tokenize(texts[index])
        lengths[index] = len(terms)
        held = Counter(terms)
        frequencies[:, index] = [held[term] for term in query]
    return frequencies, lengths


def _ascii_term_counts(query: list[str], texts: list[str]) -> tuple[Counts, Counts] | None:
    """``chunk_term_counts`` of ASCII texts, all at once over their bytes joined by newlines;
    None when a text holds a newline itself (the texts could not be told apart)."""
    if not texts:
        return np.zeros((len(query), 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    lowered = "\n".join(texts).encode("ascii").lower()
    data = np.frombuffer(lowered, dtype=np.uint8)
    breaks = np.flatnonzero(data == _NEWLINE)
    if len(breaks) != max(0, len(texts) - 1):
        return None
    starts, stops = _runs(lowered, _WORD_FLAGS)
    sizes = stops - starts
    words = sizes >= 2
    word_starts, word_sizes = starts[words], sizes[words]
    symbols = np.flatnonzero(np.frombuffer(lowered.translate(_SYMBOL_FLAGS), dtype=np.uint8))
    lengths = _per_text(word_starts, breaks) + _per_text(symbols, breaks)
    frequencies = np.zeros((len(query), len(texts)), dtype=np.int64)
    spelled = _AsciiWords(data, word_starts, word_sizes * 256 + data[word_starts])
    for row, term in enumerate(query):
        frequencies[row] = _per_text(_ascii_term_starts(term, spelled, symbols), breaks)
    return frequencies, lengths


@dataclass(frozen=True)
class _AsciiWords:
    """The word terms of lower-cased ASCII bytes: where each starts, and its size and first byte
    as one key (``size * 256 + byte``), so the candidates for a query term take one comparison."""

    data: npt.NDArray[np.uint8]
    starts: npt.NDArray[np.intp]
    keys: npt.NDArray[np.intp]


def _ascii_term_starts(
    term: str, words: _AsciiWords, symbols: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """Where ``term`` occurs as a term of the lower-cased ASCII bytes: a symbol at its byte, a
    word at the runs of its size that spell it; nowhere when it cannot be an ASCII term."""
    spelled = term.encode("ascii") if term.isascii() else b""
    if len(spelled) == 1 and _SYMBOL_FLAGS[spelled[0]]:
        at_symbols: npt.NDArray[np.intp] = symbols[words.data[symbols] == spelled[0]]
        return at_symbols
    if len(spelled) < 2 or not all(_WORD_FLAGS[byte] for byte in spelled):
        return symbols[:0]
    # The runs of its size and first byte, narrowed byte by byte: few are left after two or three.
    candidates: npt.NDArray[np.intp] = words.starts[words.keys == len(spelled) * 256 + spelled[0]]
    for offset in range(1, len(spelled)):
        candidates = candidates[words.data[candidates + offset] == spelled[offset]]
    return candidates


# --- token metering -------------------------------------------------------------------------------
#
# Chunking and selection count many texts built from the same pieces. ``_Meter`` answers with the
# estimator itself; ``_HeuristicMeter`` knows that the heuristic of texts joined by whitespace is a
# function of the pieces' CJK characters, words and bytes, and adds those up instead: a text's own
# count from its lines' (measured once, then chunked from), a selection's from its chunks'.

Stats = tuple[int, int, int]  # (CJK characters, words, UTF-8 bytes)


def _heuristic_tokens(cjk: int, words: int, size: int) -> int:
    """``HeuristicEstimator.count`` from a text's (CJK characters, words, UTF-8 bytes)."""
    if size == 0:
        return 0
    return max(script_tokens(cjk, words), (size + 3) // 4)


def _stats(text: str) -> Stats:
    cjk, words = cjk_and_words(text)
    return cjk, words, len(text) if text.isascii() else len(text.encode("utf-8"))


GAP_STATS = _stats(GAP)


Numbers = npt.NDArray[np.int64]


def _heuristic_tokens_of_each(cjk: Numbers, words: Numbers, sizes: Numbers) -> Numbers:
    """``_heuristic_tokens`` of many texts at once: the same float and integer arithmetic, element
    by element."""
    script = (1.5 * cjk + 1.3 * words).astype(np.int64)  # int() truncates, as astype does
    script[(script == 0) & ((cjk > 0) | (words > 0))] = 1  # script_tokens' floor
    tokens = np.maximum(script, (sizes + 3) // 4)
    tokens[sizes == 0] = 0
    return tokens


def _trimmed_lines(text: str) -> list[str]:
    """The chunks a text starts from: its non-empty lines, trimmed."""
    return [line for line in map(str.strip, text.split("\n")) if line]


@dataclass(frozen=True)
class _Lines:
    """A text's trimmed non-empty lines, each with its tokens and (heuristic meter) its stats, and
    the sums of their CJK characters and words (the whole text's: no field spans a newline)."""

    texts: list[str]
    tokens: list[int]
    stats: Numbers  # a row of (CJK characters, words, bytes) per line; no rows without stats
    cjk: int = 0
    words: int = 0


_NO_STATS: Numbers = np.zeros((0, 3), dtype=np.int64)


def _measured_lines(texts: list[str]) -> _Lines:
    """Each line's stats as ``_stats`` has them: the ASCII ones (nearly all) in bulk over the lines'
    bytes joined by newlines (a line's words are its runs of bytes ``str.split()`` does not split
    at, its size the distance between newlines), the others one by one."""
    data = "\n".join(texts).encode("utf-8")
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
    array = np.zeros((3, len(texts)), dtype=np.int64)  # CJK characters, words, bytes
    array[1] = _per_text(_runs(data, _FIELD_FLAGS)[0], breaks)
    array[2] = np.diff(breaks, prepend=-1, append=len(data)) - 1
    for index in [index for index, plain in enumerate(map(str.isascii, texts)) if not plain]:
        array[:, index] = _stats(texts[index])
    tokens: list[int] = _heuristic_tokens_of_each(*array).tolist()
    return _Lines(texts, tokens, array.T, int(array[0].sum()), int(array[1].sum()))


@dataclass
class _Chunks:
    texts: list[str]
    tokens: list[int]
    split: bool = False  # whether a line was too long to be one chunk
    max_tokens: int = 0  # the most a chunk could hold
    # The lines that were split, in order: the first chunk of each, its chunks, and whether it
    # was split between words. Kept next to each other, pieces cut between words are joined by
    # the space the split took out, so the line reads as it was; pieces of one long word keep
    # the newline (the heuristic counts them as separate words).
    split_starts: list[int] = field(default_factory=list)
    split_lines: list[range] = field(default_factory=list)
    split_by_words: list[bool] = field(default_factory=list)
    # Each chunk's stats (heuristic meter only), as blocks of rows: the lines' own arrays, sliced,
    # and a row per piece of a split line.
    stat_blocks: list[Numbers] = field(default_factory=list)

    def extend(self, lines: _Lines, start: int, stop: int) -> None:
        """Lines ``start`` to ``stop`` of ``lines``, each a chunk."""
        self.texts += lines.texts[start:stop]
        self.tokens += lines.tokens[start:stop]
        self.stat_blocks.append(lines.stats[start:stop])

    def stat_array(self) -> Numbers:
        """A row of (CJK characters, words, bytes) per chunk (heuristic meter only)."""
        return np.concatenate([_NO_STATS, *self.stat_blocks])

    def line_around(self, index: int) -> range:
        """The chunks of the line chunk ``index`` is (a piece of)."""
        position = bisect_right(self.split_starts, index) - 1
        if position >= 0 and index in self.split_lines[position]:
            return self.split_lines[position]
        return range(index, index + 1)

    def same_words(self, previous: int, index: int) -> bool:
        """Whether chunk ``index`` continues chunk ``previous``'s line after a space."""
        position = bisect_right(self.split_starts, previous) - 1
        return (
            position >= 0
            and self.split_by_words[position]
            and previous in self.split_lines[position]
            and index in self.split_lines[position]
        )


class _Meter:
    """Counts with the estimator itself; selection joins each candidate and counts it."""

    def __init__(self, estimator: TokenEstimator):
        self.estimator = estimator

    def count(self, text: str) -> int:
        return self.estimator.count(text)

    def lines(self, text: str) -> _Lines:
        texts = _trimmed_lines(text)
        return _Lines(texts, [self.count(line) for line in texts], _NO_STATS)

    def add(self, chunks: _Chunks, text: str) -> int:
        tokens = self.count(text)
        chunks.texts.append(text)
        chunks.tokens.append(tokens)
        return tokens

    def split_words(self, words: list[str], max_tokens: int) -> list[str]:
        spans = _greedy_spans(
            len(words), lambda start, stop: self.count(" ".join(words[start:stop])) <= max_tokens
        )
        return [" ".join(words[start:stop]) for start, stop in spans]

    def selection(self, chunks: _Chunks) -> _Selection:
        return _JoinedSelection(chunks, self.count)


class _HeuristicMeter(_Meter):
    def __init__(self, estimator: TokenEstimator):
        super().__init__(estimator)
        # Each multi-line text's lines, measured once: the text's own count adds them up, and
        # chunking it (again at each JSON attempt's target) starts from them.
        self.measured: dict[str, _Lines] = {}

    def count(self, text: str) -> int:
        if "\n" not in text:
            return _heuristic_tokens(*_stats(text))
        lines = self.lines(text)
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        return _heuristic_tokens(lines.cjk, lines.words, size)

    def lines(self, text: str) -> _Lines:
        lines = self.measured.get(text)
        if lines is None:
            lines = self.measured[text] = _measured_lines(_trimmed_lines(text))
        return lines

    def add(self, chunks: _Chunks, text: str) -> int:
        stats = _stats(text)
        tokens = _heuristic_tokens(*stats)
        chunks.texts.append(text)
        chunks.tokens.append(tokens)
        chunks.stat_blocks.append(np.array([stats], dtype=np.int64))
        return tokens

    def split_words(self, words: list[str], max_tokens: int) -> list[str]:
        # Prefix sums over the words of their CJK characters, words and bytes; the joining spaces
        # add one byte per word after the first.
        if all(map(str.isascii, words)):
            size = [0, *accumulate(map(len, words))]
            cjk: Sequence[int] = [0] * (len(words) + 1)
            counted: Sequence[int] = range(len(words) + 1)
        else:
            size = [0, *accumulate(map(len, map(str.encode, words)))]
            cjk = [0, *accumulate(map(len, map(CJK_CHAR.findall, words)))]
            counted = [0, *accumulate(map(bool, map(CJK_FREE_FIELD.search, words)))]

        def fits(start: int, stop: int) -> bool:
            tokens = _heuristic_tokens(
                cjk[stop] - cjk[start],
                counted[stop] - counted[start],
                size[stop] - size[start] + stop - start - 1,
            )
            return tokens <= max_tokens

        return [" ".join(words[start:stop]) for start, stop in _greedy_spans(len(words), fits)]

    def selection(self, chunks: _Chunks) -> _Selection:
        return _SummedSelection(chunks)


def _meter(estimator: TokenEstimator) -> _Meter:
    exact_sums = type(estimator) is HeuristicEstimator
    return _HeuristicMeter(estimator) if exact_sums else _Meter(estimator)


def _last_fitting(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest ``stop`` in [low, high] with ``fits(stop)``, ``low`` being taken regardless;
    ``fits`` must hold up to some point and fail after it (token counts grow with the text).
    Galloping first keeps the cost proportional to the answer, not to ``high``."""
    good, step = low, 1
    while good < high:
        probe = min(high, good + step)
        if not fits(probe):
            high = probe - 1
            break
        good, step = probe, step * 2
    while good < high:
        middle = (good + high + 1) // 2
        if fits(middle):
            good = middle
        else:
            high = middle - 1
    return good


def _greedy_spans(length: int, fits: Callable[[int, int], bool]) -> list[tuple[int, int]]:
    """vLLM Semantic Router's greedy split: each span grows while it still fits, and takes at least one item."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < length:
        stop = _last_fitting(functools.partial(fits, start), start + 1, length)
        spans.append((start, stop))
        start = stop
    return spans


# --- extractive text ------------------------------------------------------------------------------


def _chunk_text(text: str, target_tokens: int, meter: _Meter) -> _Chunks:
    """Non-empty trimmed lines; a line over ``max(8, target / 4)`` tokens is split greedily by
    words, or by code points when it is a single word."""
    max_tokens = max(8, target_tokens // 4)
    lines = meter.lines(text)
    chunks = _Chunks([], [], max_tokens=max_tokens)
    whole_from = 0
    for index in [index for index, tokens in enumerate(lines.tokens) if tokens > max_tokens]:
        chunks.extend(lines, whole_from, index)
        _add_pieces(chunks, lines.texts[index], max_tokens, meter)
        whole_from = index + 1
    chunks.extend(lines, whole_from, len(lines.texts))
    return chunks


def _add_pieces(chunks: _Chunks, line: str, max_tokens: int, meter: _Meter) -> None:
    """A line too long to be one chunk, as its pieces."""
    chunks.split = True
    first = len(chunks.texts)
    pieces, by_words = _split_line(line, max_tokens, meter)
    for piece in pieces:
        meter.add(chunks, piece)
    if len(pieces) > 1:
        chunks.split_starts.append(first)
        chunks.split_lines.append(range(first, len(chunks.texts)))
        chunks.split_by_words.append(by_words)


def _split_line(line: str, max_tokens: int, meter: _Meter) -> tuple[list[str], bool]:
    """The pieces of a line, and whether they were cut between words."""
    words = line.split()
    if len(words) > 1:
        return meter.split_words(words, max_tokens), True
    spans = _greedy_spans(
        len(line), lambda start, stop: meter.count(line[start:stop]) <= max_tokens
    )
    return [line[start:stop] for start, stop in spans], False


def _join(chunks: _Chunks, indexes: Sequence[int]) -> str:
    texts = chunks.texts
    parts: list[str] = []
    previous = -1
    for index in indexes:
        if previous >= 0 and index > previous + 1:
            parts.append(GAP)
        if previous >= 0 and index == previous + 1 and chunks.same_words(previous, index):
            parts[-1] = f"{parts[-1]} {texts[index]}"  # the next words of the same line
        else:
            parts.append(texts[index])
        previous = index
    return "\n".join(parts)


class _Selection:
    def __init__(self, chunks: _Chunks):
        self.chunks = chunks
        self.indexes: list[int] = []  # kept sorted

    def tokens_with(self, index: int) -> int:
        raise NotImplementedError

    def tokens(self) -> int:
        """The tokens of the kept chunks joined."""
        raise NotImplementedError

    def worth_trying(self, ranked: list[int], target_tokens: int) -> Iterator[int]:
        """The chunks of ``ranked``, in order, that adding may change the selection with: each
        is tried as it comes, after the ones before it."""
        del target_tokens  # every chunk with tokens is tried
        return (index for index in ranked if self.chunks.tokens[index] > 0)

    def holds(self, index: int) -> bool:
        position = bisect_left(self.indexes, index)
        return position < len(self.indexes) and self.indexes[position] == index

    def add_if_fits(self, index: int, target_tokens: int) -> None:
        if not self.holds(index) and self.tokens_with(index) <= target_tokens:
            self._add(index)

    def add_all_if_fit(self, indexes: range, target_tokens: int) -> bool:
        """All of ``indexes`` (the chunks of one line), or none of them."""
        missing = [index for index in indexes if not self.holds(index)]
        if not missing:
            return True
        if self._cannot_fit(missing, target_tokens):
            return False
        saved = self._save()
        for index in missing:
            self._add(index)
        if self.tokens() <= target_tokens:
            return True
        self._restore(saved)
        return False

    def _add(self, index: int) -> None:
        insort(self.indexes, index)

    def _cannot_fit(self, missing: list[int], target_tokens: int) -> bool:
        """A quick reject, before trying ``missing`` in; False when unsure."""
        return False

    def _save(self) -> Any:
        return list(self.indexes)

    def _restore(self, saved: Any) -> None:
        self.indexes = saved


class _JoinedSelection(_Selection):
    def __init__(self, chunks: _Chunks, count: Callable[[str], int]):
        super().__init__(chunks)
        self.count = count

    def tokens_with(self, index: int) -> int:
        trial = list(self.indexes)
        insort(trial, index)
        return self.count(_join(self.chunks, trial))

    def tokens(self) -> int:
        return self.count(_join(self.chunks, self.indexes))


# The first stretch of the ranking ``_SummedSelection.worth_trying`` checks at once, after each
# chunk it lets through: the best chunks usually fit one after the other.
_FIRST_WINDOW = 32


class _SummedSelection(_Selection):
    """Running sums of the kept chunks' stats and of the gaps between them, with a quick reject:
    a chunk whose bytes or words alone exceed what is left cannot fit, whatever gap it closes; and
    ``worth_trying``, which skips the chunks that cannot fit in bulk."""

    def __init__(self, chunks: _Chunks):
        super().__init__(chunks)
        self.sums: Stats = (0, 0, 0)
        self.gaps = 0
        self.room: tuple[int, float] | None = None
        # The chunks kept or next to a kept one, ever (a restore leaves them marked: the mark
        # only sends a chunk to the scalar checks).
        self.beside = np.zeros(len(chunks.texts) + 1, dtype=bool)
        self.changes = 0  # adds and restores: when bulk checks made before are out of date
        self.stats = chunks.stat_array()

    def _stats_of(self, index: int) -> Stats:
        cjk, words, size = self.stats[index].tolist()  # Python ints: the sums stay exact
        return cjk, words, size

    def add_if_fits(self, index: int, target_tokens: int) -> None:
        if self.room is None:
            self.room = self._room(target_tokens)
        cjk, words, size = self._stats_of(index)
        if size > self.room[0] or 1.5 * cjk + 1.3 * words > self.room[1]:
            return
        super().add_if_fits(index, target_tokens)

    def _room(self, target_tokens: int) -> tuple[int, float]:
        # The fewest gaps and newlines any addition can leave: one gap closed, one newline added.
        gaps = max(0, self.gaps - 1)
        size = self.sums[2] + gaps * (GAP_STATS[2] + 1) + len(self.indexes)
        script = 1.5 * self.sums[0] + 1.3 * (self.sums[1] + gaps * GAP_STATS[1])
        # bytes: (size + 3) // 4 <= target  <=>  size <= 4 * target; script: int(x) <= target
        # <=> x < target + 1, with a margin far above float rounding.
        return 4 * target_tokens - size, target_tokens + 1 - script + 1e-6

    def worth_trying(self, ranked: list[int], target_tokens: int) -> Iterator[int]:
        """Skips, in bulk, the chunks that cannot fit with the selection as it is, a window of
        ``ranked`` at a time, so the scalar checks run on few more chunks than get added.

        A chunk next to no kept one adds exactly one gap (none to an empty selection), so its
        ``tokens_with`` is the same function of its own stats for all of them and is computed
        for the whole window at once. The chunks beside kept ones (``beside``: what the gaps do
        depends on which side), and the pieces of split lines (adding one may try its whole
        line), always come."""
        order = np.array(ranked, dtype=np.int64)
        stats = self.stats[order]
        always = np.zeros(len(self.chunks.texts), dtype=bool)
        for line in self.chunks.split_lines:
            always[line.start : line.stop] = True
        start, window = 0, _FIRST_WINDOW
        while start < len(order):
            stop = min(len(order), start + window)
            indexes = order[start:stop]
            chances = always[indexes] | self.beside[indexes]
            chances |= self._fits_apart(stats[start:stop], target_tokens)
            changes = self.changes
            for position in (start + hit for hit in np.flatnonzero(chances).tolist()):
                if self.chunks.tokens[ranked[position]] > 0:
                    yield ranked[position]
                if self.changes != changes:  # the window's checks are out of date
                    start, window = position + 1, _FIRST_WINDOW
                    break
            else:
                # Nothing here was added; further down the ranking, nothing fits for longer
                # stretches.
                start, window = stop, window * 2

    def _fits_apart(self, stats: Numbers, target_tokens: int) -> npt.NDArray[np.bool_]:
        """``tokens_with(index) <= target_tokens`` for chunks (their stats) next to no kept one."""
        gaps = self.gaps + (1 if self.indexes else 0)
        newlines = len(self.indexes) + gaps
        tokens = _heuristic_tokens_of_each(
            stats[:, 0] + (self.sums[0] + gaps * GAP_STATS[0]),
            stats[:, 1] + (self.sums[1] + gaps * GAP_STATS[1]),
            stats[:, 2] + (self.sums[2] + gaps * GAP_STATS[2] + newlines),
        )
        fits: npt.NDArray[np.bool_] = tokens <= target_tokens
        return fits

    def _gaps_with(self, index: int) -> int:
        position = bisect_left(self.indexes, index)
        before = self.indexes[position - 1] if position > 0 else None
        after = self.indexes[position] if position < len(self.indexes) else None
        gaps = self.gaps
        if before is not None and after is not None and after > before + 1:
            gaps -= 1
        if before is not None and index > before + 1:
            gaps += 1
        if after is not None and after > index + 1:
            gaps += 1
        return gaps

    def _sums_with(self, index: int) -> Stats:
        cjk, words, size = self._stats_of(index)
        return self.sums[0] + cjk, self.sums[1] + words, self.sums[2] + size

    def tokens_with(self, index: int) -> int:
        cjk, words, size = self._sums_with(index)
        gaps = self._gaps_with(index)
        newlines = len(self.indexes) + gaps  # parts - 1
        return _heuristic_tokens(
            cjk + gaps * GAP_STATS[0],
            words + gaps * GAP_STATS[1],
            size + gaps * GAP_STATS[2] + newlines,
        )

    def tokens(self) -> int:
        if not self.indexes:
            return 0
        cjk, words, size = self.sums
        newlines = len(self.indexes) - 1 + self.gaps
        return _heuristic_tokens(
            cjk + self.gaps * GAP_STATS[0],
            words + self.gaps * GAP_STATS[1],
            size + self.gaps * GAP_STATS[2] + newlines,
        )

    def _add(self, index: int) -> None:
        self.gaps = self._gaps_with(index)
        self.sums = self._sums_with(index)
        self.room = None
        self.beside[max(0, index - 1) : index + 2] = True
        self.changes += 1
        super()._add(index)

    def _cannot_fit(self, missing: list[int], target_tokens: int) -> bool:
        # The fewest gaps and newlines adding them can leave: each may close a gap, each adds a
        # newline.
        cjk = words = size = 0
        for index in missing:
            chunk_cjk, chunk_words, chunk_size = self._stats_of(index)
            cjk, words, size = cjk + chunk_cjk, words + chunk_words, size + chunk_size
        gaps = max(0, self.gaps - len(missing))
        newlines = len(self.indexes) + len(missing) - 1 + gaps
        size += self.sums[2] + gaps * GAP_STATS[2] + newlines
        script = 1.5 * (self.sums[0] + cjk) + 1.3 * (self.sums[1] + words + gaps * GAP_STATS[1])
        return size > 4 * target_tokens or script >= target_tokens + 1 + 1e-6

    def _save(self) -> Any:
        return list(self.indexes), self.sums, self.gaps

    def _restore(self, saved: Any) -> None:
        self.indexes, self.sums, self.gaps = saved
        self.room = None
        self.changes += 1


def _select(chunks: _Chunks, scores: list[float], target_tokens: int, meter: _Meter) -> list[int]:
    """vLLM Semantic Router's order: the best chunk first (so two boundary markers cannot starve
    it), then the first and the last chunk, then the rest by score, each only while the joined
    result fits.

    A chunk that is a piece of a line too long to be one chunk brings the rest of its line when the
    whole line fits: the line was cut for its size, not for its sense, and the query's terms and
    the answer are often in different pieces of it ("refund for order 4471 approved" | "on March
    3"). Each line is tried whole once; when it does not fit, the piece comes alone."""
    ranked: list[int] = np.argsort(-np.array(scores), kind="stable").tolist()
    selection = meter.selection(chunks)
    # The split line each chunk belongs to (its position in ``split_lines``), -1 for a whole line;
    # a line is tried whole once, so its entry goes back to -1 then.
    owner = [-1] * len(scores)
    for position, line in enumerate(chunks.split_lines):
        owner[line.start : line.stop] = [position] * len(line)

    def add(index: int) -> None:
        position = owner[index]
        if position >= 0:
            line = chunks.split_lines[position]
            owner[line.start : line.stop] = [-1] * len(line)
            if selection.add_all_if_fit(line, target_tokens):
                return
        selection.add_if_fits(index, target_tokens)

    add(ranked[0])
    selection.add_if_fits(0, target_tokens)
    selection.add_if_fits(len(scores) - 1, target_tokens)
    for index in selection.worth_trying(ranked, target_tokens):
        add(index)
    return selection.indexes


# Chunks and their scores by (text, query): the JSON attempts re-run the text path on the same
# strings with slightly smaller targets, which only changes the chunks when a line had to be split
# or no longer fits the smaller chunk size.
RankCache = dict[tuple[str, str], tuple[_Chunks, list[float]]]


def _ranked_chunks(
    text: str, query: str, target_tokens: int, meter: _Meter, cache: RankCache | None
) -> tuple[_Chunks, list[float]]:
    max_tokens = max(8, target_tokens // 4)
    cached = cache.get((text, query)) if cache is not None else None
    if cached and (
        cached[0].max_tokens == max_tokens
        or (not cached[0].split and max(cached[0].tokens, default=0) <= max_tokens)
    ):
        return cached
    chunks = _chunk_text(text, target_tokens, meter)
    frequencies, lengths = chunk_term_counts(tokenize_terms(query), chunks.texts)
    scores = bm25.scores_from_counts(
        frequencies, lengths, average_length_floor=AVERAGE_LENGTH_FLOOR
    )
    if scores:
        scores[0] += BOUNDARY_BONUS
        scores[-1] += BOUNDARY_BONUS
    if cache is not None:
        cache[(text, query)] = (chunks, scores)
    return chunks, scores


def _compress_text(
    text: str,
    query: str,
    original: int,
    target_tokens: int,
    meter: _Meter,
    cache: RankCache | None = None,
) -> TextResult | None:
    chunks, scores = _ranked_chunks(text, query, target_tokens, meter, cache)
    if len(chunks.texts) < 2:
        return None
    kept = _select(chunks, scores, target_tokens, meter)
    if not kept:
        return None
    compressed = _join(chunks, kept)
    tokens = meter.count(compressed)
    if tokens > target_tokens or tokens >= original:
        return None
    return TextResult(compressed, True, "text", len(chunks.texts) - len(kept), original, tokens)


# --- JSON -----------------------------------------------------------------------------------------


class _Object(list[tuple[str, Any]]):
    """A decoded JSON object as its (key, value) pairs: order and duplicate keys survive."""


@dataclass(frozen=True)
class _Number:
    raw: str  # the number's text as it was written, re-emitted verbatim


class _NotJSON(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJSON(name)  # NaN and Infinity are Python extensions, not JSON


def _decode(text: str) -> Any:
    return json.loads(
        text,
        object_pairs_hook=_Object,
        parse_int=_Number,
        parse_float=_Number,
        parse_constant=_reject_constant,
    )


JsonKind = Literal["container", "string", "scalar", "malformed", "text"]


def _json_kind(text: str) -> tuple[JsonKind, Any]:
    """How ``text`` is handled, with its decoded value: a JSON object or array, a JSON string
    document, another JSON scalar (kept whole: it has no chunks), text that starts like an object or
    an array but does not parse (kept whole), or plain text."""
    stripped = text.strip()
    if not stripped or stripped[0] not in '{["tfn-0123456789':
        return "text", None
    try:
        value = _decode(text)
    except (ValueError, RecursionError):
        return ("malformed" if stripped[0] in "{[" else "text"), None
    if isinstance(value, list):
        return "container", value
    return ("string" if isinstance(value, str) else "scalar"), value


def _encode_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=not _utf8(value))


def _encode(value: Any) -> str:
    """Compact JSON, keys in their original order, numbers as written, non-ASCII kept as is."""
    if isinstance(value, _Object):
        return "{" + ",".join(f"{_encode_string(key)}:{_encode(item)}" for key, item in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(item) for item in value) + "]"
    if isinstance(value, str):
        return _encode_string(value)
    if isinstance(value, _Number):
        return value.raw
    return {True: "true", False: "false", None: "null"}[value]


def _map_leaves(
    value: Any, query: str, leaf: Callable[[str, str], tuple[str, int]]
) -> tuple[Any, int]:
    """``value`` with every string leaf replaced by ``leaf(text, query)``, and the omitted chunks;
    object keys are appended to the query on the way down, array items keep their parent's."""
    if isinstance(value, _Object):
        pairs, omitted = _Object(), 0
        for key, item in value:
            new_item, item_omitted = _map_leaves(item, f"{query} {key}", leaf)
            pairs.append((key, new_item))
            omitted += item_omitted
        return pairs, omitted
    if isinstance(value, list):
        items, omitted = [], 0
        for item in value:
            new_item, item_omitted = _map_leaves(item, query, leaf)
            items.append(new_item)
            omitted += item_omitted
        return items, omitted
    if isinstance(value, str):
        return leaf(value, query)
    return value, 0


def _leaf_tokens(leaf: str, meter: _Meter) -> int:
    return meter.count(leaf) if _utf8(leaf) else meter.count(_encode_string(leaf))


def _compress_json(
    value: Any, query: str, original: int, target_tokens: int, meter: _Meter
) -> TextResult | None:
    """Each string leaf gets a share of the budget the skeleton leaves (``_leaf_budgets``);
    leaves over their share go through the text path with the query plus the keys above them;
    a few attempts, the budget scaled down by how far the last one overshot."""
    try:
        skeleton, _ = _map_leaves(value, "", lambda _leaf, _query: ("", 0))
        skeleton_tokens = meter.count(_encode(skeleton))
        leaves: list[tuple[str, str]] = []  # each string leaf with its query, in visiting order

        def collect(leaf: str, leaf_query: str) -> tuple[str, int]:
            leaves.append((leaf, leaf_query))
            return leaf, 0

        _map_leaves(value, query, collect)
    except RecursionError:
        return None
    sizes = [_leaf_tokens(leaf, meter) for leaf, _ in leaves]
    total = sum(sizes)
    if skeleton_tokens >= target_tokens or total == 0:
        return None
    available = target_tokens - skeleton_tokens
    cache: RankCache = {}

    for _ in range(JSON_ATTEMPTS):
        budgets = _leaf_budgets(leaves, sizes, available, meter, cache)
        shrink = _leaf_shrinker(sizes, budgets, meter, cache)
        try:
            compressed_value, omitted = _map_leaves(value, query, shrink)
            compressed = _encode(compressed_value)
        except RecursionError:
            return None
        tokens = meter.count(compressed)
        if tokens <= target_tokens and tokens < original:
            return TextResult(compressed, True, "json", omitted, original, tokens)
        # Shrink by the overshoot and a tenth more: chunks are kept or dropped whole, so a budget
        # only fractionally smaller would pick the same chunks again.
        available = max(1, int(available * target_tokens / max(1, tokens) * 0.9))
    return None


def _leaf_shrinker(
    sizes: list[int], budgets: list[int], meter: _Meter, cache: RankCache
) -> Callable[[str, str], tuple[str, int]]:
    """``_map_leaves``' callback: each leaf, visited in the order listed, to its budget."""
    visit = iter(range(len(sizes)))

    def shrink(leaf: str, leaf_query: str) -> tuple[str, int]:
        position = next(visit)
        tokens, budget = sizes[position], budgets[position]
        if tokens == 0 or tokens <= budget or not _utf8(leaf):
            return leaf, 0
        result = _compress_text(leaf, leaf_query, tokens, budget, meter, cache)
        return (result.text, result.omitted_chunks) if result else (leaf, 0)

    return shrink


def _leaf_budgets(
    leaves: list[tuple[str, str]],
    sizes: list[int],
    available: int,
    meter: _Meter,
    cache: RankCache,
) -> list[int]:
    """vLLM Semantic Router's shares: each leaf ``available`` in proportion to its tokens.

    One decision of ours, §2.4's order over the whole document: the leaf holding the document's
    best-matching chunk (the best of each leaf over its share, boundary bonus aside) is first given
    room for that chunk's whole line, and the other leaves share the rest in proportion. Without
    it, the one line that answers, in one result of a dozen, gets a dozenth of the budget and is
    cut to the piece that names the question's terms. A line longer than the whole budget
    reserves nothing."""
    total = sum(sizes)
    budgets = [max(1, available * size // total) for size in sizes]
    best: tuple[float, int, int] | None = None  # (score, leaf, tokens of the chunk's line)
    for position, (leaf, leaf_query) in enumerate(leaves):
        if sizes[position] <= budgets[position] or not _utf8(leaf):
            continue
        chunks, scores = _ranked_chunks(leaf, leaf_query, budgets[position], meter, cache)
        if len(scores) < 2:
            continue
        matches = [*scores]
        matches[0] -= BOUNDARY_BONUS
        matches[-1] -= BOUNDARY_BONUS
        index = max(range(len(matches)), key=matches.__getitem__)  # the first best
        if matches[index] > 0 and (best is None or matches[index] > best[0]):
            line = list(chunks.line_around(index))
            best = (matches[index], position, meter.count(_join(chunks, line)))
    if best is None:
        return budgets
    _, chosen, needed = best
    if needed <= budgets[chosen] or needed > available:  # room already, or none to give
        return budgets
    rest, others = available - needed, total - sizes[chosen]
    return [
        needed if position == chosen else max(1, rest * size // max(1, others))
        for position, size in enumerate(sizes)
    ]


def _compress_json_string(
    decoded: str, query: str, original: int, target_tokens: int, meter: _Meter
) -> TextResult | None:
    """A JSON string document: compress the decoded text, re-encode it. Upstream tries once with
    the whole target, which the escapes added by re-encoding often overshoot; here the inner target
    starts scaled by the document's own escape overhead and is retried like ``_compress_json``."""
    if not _utf8(decoded):
        return None
    inner_original = meter.count(decoded)
    inner_target = max(1, min(target_tokens, target_tokens * inner_original // max(1, original)))
    cache: RankCache = {}
    for _ in range(JSON_ATTEMPTS):
        inner = _compress_text(decoded, query, inner_original, inner_target, meter, cache)
        if inner is None:
            return None
        compressed = _encode_string(inner.text)
        tokens = meter.count(compressed)
        if tokens <= target_tokens and tokens < original:
            return TextResult(compressed, True, "json", inner.omitted_chunks, original, tokens)
        inner_target = max(1, int(inner_target * target_tokens / max(1, tokens) * 0.9))
    return None
