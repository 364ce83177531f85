"""Text-level compression: extractive (plain text and JSON string leaves) and middle truncation.

Pure functions; deterministic; an applied result never counts more tokens than its input or its
target, and an input that cannot be shrunk comes back as it was (``applied=False``).

* ``compress_extractive`` is vLLM Semantic Router's ``CompressToolOutput``: lines
  become chunks, BM25 against the query plus a boundary bonus ranks them, and the best chunk, the
  first, the last and then the rest by score are kept while the joined result fits the target.
  JSON objects and arrays only lose text inside their string leaves (key order, duplicate keys,
  array lengths and the exact text of numbers are kept), a JSON string document is decoded,
  compressed and re-encoded, and text that starts like JSON but does not parse is left alone.
* ``truncate_middle`` keeps the beginning and the end of a text, as vLLM Semantic Router does.
* ``tokenize_terms`` and ``bm25_scores`` (the shared ``contextplatform.core.bm25`` on these
  terms) are the ranking helpers the engine uses.

Every count goes through the estimator passed in. For ``HeuristicEstimator`` the counts of joined
chunks are computed from per-chunk sums instead of re-counting each candidate text; they are exactly
the estimator's counts (the tests compare both paths), just linear instead of quadratic.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import unicodedata
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

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


# --- token metering -------------------------------------------------------------------------------
#
# Chunking and selection count many texts built from the same pieces. ``_Meter`` answers with the
# estimator itself; ``_HeuristicMeter`` knows that the heuristic of texts joined by whitespace is a
# function of the pieces' CJK characters, words and bytes, and adds those up instead.

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


@dataclass
class _Chunks:
    texts: list[str]
    tokens: list[int]
    stats: list[Stats]  # filled by the heuristic meter only
    split: bool = False  # whether a line was too long to be one chunk


class _Meter:
    """Counts with the estimator itself; selection joins each candidate and counts it."""

    def __init__(self, estimator: TokenEstimator):
        self.estimator = estimator

    def count(self, text: str) -> int:
        return self.estimator.count(text)

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
    def add(self, chunks: _Chunks, text: str) -> int:
        stats = _stats(text)
        tokens = _heuristic_tokens(*stats)
        chunks.texts.append(text)
        chunks.tokens.append(tokens)
        chunks.stats.append(stats)
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
    chunks = _Chunks([], [], [])
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or meter.add(chunks, line) <= max_tokens:
            continue
        # Too long: replace it by its pieces.
        chunks.split = True
        chunks.texts.pop()
        chunks.tokens.pop()
        if chunks.stats:
            chunks.stats.pop()
        for piece in _split_line(line, max_tokens, meter):
            meter.add(chunks, piece)
    return chunks


def _split_line(line: str, max_tokens: int, meter: _Meter) -> list[str]:
    words = line.split()
    if len(words) > 1:
        return meter.split_words(words, max_tokens)
    spans = _greedy_spans(
        len(line), lambda start, stop: meter.count(line[start:stop]) <= max_tokens
    )
    return [line[start:stop] for start, stop in spans]


def _join(texts: Sequence[str], indexes: Sequence[int]) -> str:
    parts: list[str] = []
    previous = -1
    for index in indexes:
        if previous >= 0 and index > previous + 1:
            parts.append(GAP)
        parts.append(texts[index])
        previous = index
    return "\n".join(parts)


class _Selection:
    def __init__(self, chunks: _Chunks):
        self.chunks = chunks
        self.indexes: list[int] = []  # kept sorted

    def tokens_with(self, index: int) -> int:
        raise NotImplementedError

    def add_if_fits(self, index: int, target_tokens: int) -> None:
        position = bisect_left(self.indexes, index)
        if position < len(self.indexes) and self.indexes[position] == index:
            return
        if self.tokens_with(index) <= target_tokens:
            self._add(index)

    def _add(self, index: int) -> None:
        insort(self.indexes, index)


class _JoinedSelection(_Selection):
    def __init__(self, chunks: _Chunks, count: Callable[[str], int]):
        super().__init__(chunks)
        self.count = count

    def tokens_with(self, index: int) -> int:
        trial = list(self.indexes)
        insort(trial, index)
        return self.count(_join(self.chunks.texts, trial))


class _SummedSelection(_Selection):
    """Running sums of the kept chunks' stats and of the gaps between them, with a quick reject:
    a chunk whose bytes or words alone exceed what is left cannot fit, whatever gap it closes."""

    def __init__(self, chunks: _Chunks):
        super().__init__(chunks)
        self.sums: Stats = (0, 0, 0)
        self.gaps = 0
        self.room: tuple[int, float] | None = None

    def add_if_fits(self, index: int, target_tokens: int) -> None:
        if self.room is None:
            self.room = self._room(target_tokens)
        cjk, words, size = self.chunks.stats[index]
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
        cjk, words, size = self.chunks.stats[index]
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

    def _add(self, index: int) -> None:
        self.gaps = self._gaps_with(index)
        self.sums = self._sums_with(index)
        self.room = None
        super()._add(index)


def _select(chunks: _Chunks, scores: list[float], target_tokens: int, meter: _Meter) -> list[int]:
    """The best chunk first (so two boundary markers cannot starve it), then the first and the
    last chunk, then the rest by score, each only while the joined result fits."""
    ranked = sorted(range(len(scores)), key=lambda index: -scores[index])  # stable
    selection = meter.selection(chunks)
    selection.add_if_fits(ranked[0], target_tokens)
    selection.add_if_fits(0, target_tokens)
    selection.add_if_fits(len(scores) - 1, target_tokens)
    for index in ranked:
        if chunks.tokens[index] > 0:
            selection.add_if_fits(index, target_tokens)
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
    if cached and not cached[0].split and max(cached[0].tokens, default=0) <= max_tokens:
        return cached
    chunks = _chunk_text(text, target_tokens, meter)
    tokenize = _term_tokenizer().terms
    scores = chunk_scores(tokenize(query), [tokenize(chunk) for chunk in chunks.texts])
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
    compressed = _join(chunks.texts, kept)
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


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, _Object):
        for _, item in value:
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value


def _leaf_tokens(leaf: str, meter: _Meter) -> int:
    return meter.count(leaf) if _utf8(leaf) else meter.count(_encode_string(leaf))


def _compress_json(
    value: Any, query: str, original: int, target_tokens: int, meter: _Meter
) -> TextResult | None:
    """Each string leaf gets a share of the budget the skeleton leaves, in proportion to
    its tokens; leaves over their share go through the text path with the query plus the keys
    above them; up to three attempts, the budget scaled down by how far the last one overshot."""
    try:
        skeleton, _ = _map_leaves(value, "", lambda _leaf, _query: ("", 0))
        skeleton_tokens = meter.count(_encode(skeleton))
        total = sum(_leaf_tokens(leaf, meter) for leaf in _leaves(value))
    except RecursionError:
        return None
    if skeleton_tokens >= target_tokens or total == 0:
        return None
    available = target_tokens - skeleton_tokens
    cache: RankCache = {}

    def shrink(leaf: str, leaf_query: str) -> tuple[str, int]:
        tokens = _leaf_tokens(leaf, meter)
        budget = max(1, available * tokens // total)
        if tokens == 0 or tokens <= budget or not _utf8(leaf):
            return leaf, 0
        result = _compress_text(leaf, leaf_query, tokens, budget, meter, cache)
        return (result.text, result.omitted_chunks) if result else (leaf, 0)

    for _ in range(JSON_ATTEMPTS):
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
