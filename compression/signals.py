"""Prompt (signal) compression: the text the routing signals, the sources and the judge read.

vLLM Semantic Router's ``promptcompression``, with its profiles: the text is split into
sentences, each scored by TextRank, a U-shaped position weight, TF-IDF density and novelty, and the
first and last sentences plus the best of the rest are kept within ``max_tokens``, in their
original order. No model is involved, and the request sent to the model is never changed by this.

Tokens are vLLM Semantic Router's ``CountTokensApprox``, the script-aware heuristic, for ``max_tokens`` and every
skip decision, whichever estimator the caller uses elsewhere.

Decisions where upstream leaves room:

* Profile fields are overridden by every field the config sets (not only those > 0, as upstream):
  ``novelty_weight: 0`` or ``preserve_first_n: 0`` mean what they say.
* The budget is checked against the tokens of the joined output, not a sum of per-sentence counts
  (whose rounding lets upstream overshoot ``max_tokens``).
* Ties in the composite score keep the earlier sentence first.
* When not even one sentence fits, the text is returned whole rather than empty.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from compression.config import Profile, SignalsConfig
from contextplatform.core.estimation import (
    TokenEstimator,
    cjk_and_words,
    is_cjk,
    script_aware_tokens,
    script_tokens,
)

MAX_SENTENCES = 500
TEXTRANK_DAMPING = 0.85
TEXTRANK_ITERATIONS = 100
TEXTRANK_TOLERANCE = 1e-5

# . ! ?, the CJK fullwidth full stop, exclamation and question marks, the Arabic question mark,
# the Devanagari danda and double danda, the Ethiopic and the Armenian full stops.
TERMINATORS = frozenset(".!?\u3002\uff01\uff1f\u061f\u0964\u0965\u1362\u0589")
TERMINATOR = re.compile(f"[{re.escape(''.join(sorted(TERMINATORS)))}]")


@dataclass(frozen=True)
class SignalProfile:
    textrank_weight: float
    position_weight: float
    tfidf_weight: float
    novelty_weight: float
    position_depth: float
    preserve_first_n: int
    preserve_last_n: int


PROFILES: dict[Profile, SignalProfile] = {
    "default": SignalProfile(0.20, 0.40, 0.35, 0.05, 0.5, 3, 2),
    "coding": SignalProfile(0.15, 0.30, 0.40, 0.15, 0.60, 2, 4),
    "medical": SignalProfile(0.20, 0.35, 0.30, 0.15, 0.5, 3, 2),
    "security": SignalProfile(0.15, 0.30, 0.25, 0.30, 0.60, 2, 3),
    "multi_turn": SignalProfile(0.15, 0.25, 0.35, 0.10, 0.5, 2, 5),
}

WEIGHT_FIELDS = ("textrank_weight", "position_weight", "tfidf_weight", "novelty_weight")


@dataclass(frozen=True)
class SignalResult:
    text: str  # the input itself unless applied
    applied: bool
    # disabled | below_min_length | within_budget | single_sentence | nothing_fits
    skip_reason: str | None
    tokens_before: int
    tokens_after: int
    sentences: int
    kept: tuple[int, ...]  # indexes of the kept sentences (after sampling)


def resolve_profile(config: SignalsConfig) -> SignalProfile:
    """The config's profile with every field the config sets, weights normalised to sum 1 (all
    zero: 0.25 each)."""
    values = asdict(PROFILES[config.profile])
    for field in values:
        override = getattr(config, field)
        if override is not None:
            values[field] = override
    total = sum(values[field] for field in WEIGHT_FIELDS)
    for field in WEIGHT_FIELDS:
        values[field] = values[field] / total if total > 0 else 0.25
    values["position_depth"] = min(1.0, max(0.0, values["position_depth"]))
    return SignalProfile(**values)


def compress_signal_text(
    text: str, config: SignalsConfig, estimator: TokenEstimator | None = None
) -> str:
    """The text the signals should read: ``text`` itself, or its best sentences within
    ``config.max_tokens``. See ``compress_signal``."""
    return compress_signal(text, config, estimator).text


def compress_signal(
    text: str, config: SignalsConfig, estimator: TokenEstimator | None = None
) -> SignalResult:
    """``max_tokens`` is in vLLM Semantic Router's unit, the script-aware ``CountTokensApprox``, whatever the
    estimator; the estimator, when given, is only what ``tokens_before`` and ``tokens_after`` are
    reported in (the platform's own counts for metrics)."""
    tokens = script_aware_tokens(text)
    report = estimator.count if estimator is not None else script_aware_tokens
    reported = report(text)

    def skipped(reason: str, sentences: int = 0) -> SignalResult:
        return SignalResult(text, False, reason, reported, reported, sentences, ())

    if not config.enabled:
        return skipped("disabled")
    if len(text) <= config.min_length:
        return skipped("below_min_length")
    if tokens <= config.max_tokens:
        return skipped("within_budget")
    sentences = split_sentences(text)
    if len(sentences) <= 1:
        return skipped("single_sentence", len(sentences))
    sentences = sample_sentences(sentences, MAX_SENTENCES)
    profile = resolve_profile(config)
    scores = composite_scores(sentences, profile)
    kept = _select(sentences, scores, profile, config.max_tokens)
    if not kept:
        return skipped("nothing_fits", len(sentences))
    compressed = " ".join(sentences[index] for index in kept)
    return SignalResult(
        compressed, True, None, reported, report(compressed), len(sentences), tuple(kept)
    )


# --- sentences and words --------------------------------------------------------------------------


def split_sentences(text: str) -> list[str]:
    """vLLM Semantic Router's ``SplitSentences``: split after ``. ! ?`` and the CJK, Arabic, Devanagari, Ethiopic and
    Armenian terminators, keeping repeated terminators ("?!", "...") with their sentence; a period
    between digits (3.14) or after a single capital followed by a space and a capital ("A. B") does
    not end a sentence."""
    text = text.strip()
    sentences: list[str] = []
    start = resume = 0
    for match in TERMINATOR.finditer(text):
        position = match.start()
        if position < resume:
            continue  # a trailing terminator already taken with its sentence
        if text[position] == "." and (
            _decimal_point(text, start, position) or _initial(text, start, position)
        ):
            continue
        end = position + 1
        while end < len(text) and text[end] in TERMINATORS:
            end += 1
        if sentence := text[start:end].strip():
            sentences.append(sentence)
        while end < len(text) and text[end].isspace():
            end += 1
        start = resume = end
    if tail := text[start:].strip():
        sentences.append(tail)
    return sentences


def _char(text: str, position: int) -> str:
    return text[position] if 0 <= position < len(text) else ""


def _decimal_point(text: str, start: int, position: int) -> bool:
    previous = _char(text, position - 1) if position > start else ""
    return previous.isdecimal() and _char(text, position + 1).isdecimal()


def _upper(char: str) -> bool:
    return bool(char) and unicodedata.category(char) == "Lu"


def _initial(text: str, start: int, position: int) -> bool:
    if position <= start or not _upper(text[position - 1]):
        return False
    if position - 1 != start and _char(text, position - 2) != " ":
        return False
    return _char(text, position + 1) == " " and _upper(_char(text, position + 2))


# A field's core runs from its first to its last letter or digit; re's \w is close enough to find
# it, and non-ASCII cores are then checked exactly.
FIELD_CORE = re.compile(r"[^\W_](?:\S*[^\W_])?")


def tokenize_words(text: str) -> list[str]:
    """vLLM Semantic Router's ``TokenizeWords``: per whitespace field, lower-cased, without its leading and trailing
    punctuation; CJK characters are tokens of their own, plus the bigram of two adjacent ones."""
    tokens: list[str] = []
    for core in FIELD_CORE.findall(text):
        if core.isascii():
            tokens.append(core.lower())
        else:
            tokens.extend(_core_tokens(core))
    return tokens


def _token_char(char: str) -> bool:
    return char.isalpha() or char.isdecimal()  # Go: unicode.IsLetter || unicode.IsDigit


def _lower(text: str) -> str:
    # Go lower-cases rune by rune: "İ" becomes "i", and sigma has no word-final form.
    return text.replace("\u0130", "i").replace("\u03a3", "\u03c3").lower()


def _core_tokens(core: str) -> list[str]:
    first, last = 0, len(core)
    while first < last and not _token_char(core[first]):
        first += 1
    while last > first and not _token_char(core[last - 1]):
        last -= 1
    core = core[first:last]
    tokens: list[str] = []
    segment = 0  # where the pending non-CJK text starts
    for position, char in enumerate(core):
        if not is_cjk(char):
            continue
        if position > segment:
            tokens.append(_lower(core[segment:position]))
        tokens.append(char)
        if position > 0 and is_cjk(core[position - 1]):
            tokens.append(core[position - 1 : position + 1])
        segment = position + 1
    if segment < len(core):
        tokens.append(_lower(core[segment:]))
    return tokens


def sample_sentences(sentences: list[str], limit: int) -> list[str]:
    """Over ``limit`` sentences: the first, the last, and ``limit - 2`` evenly spaced between."""
    total = len(sentences)
    if total <= limit:
        return sentences
    middle = limit - 2
    step = (total - 2) / middle
    picked = [min(total - 2, 1 + int(index * step + 0.5)) for index in range(middle)]
    return [sentences[0], *(sentences[index] for index in picked), sentences[-1]]


# --- scores ---------------------------------------------------------------------------------------


def composite_scores(sentences: list[str], profile: SignalProfile) -> list[float]:
    tokens = [tokenize_words(sentence) for sentence in sentences]
    frequencies = _tf_matrix(tokens)
    parts = (
        (profile.textrank_weight, textrank_scores(frequencies)),
        (profile.position_weight, position_weights(len(sentences), profile.position_depth)),
        (profile.tfidf_weight, tfidf_scores(tokens, frequencies)),
        (profile.novelty_weight, novelty_scores(frequencies)),
    )
    return [
        sum(weight * float(scores[index]) for weight, scores in parts)
        for index in range(len(sentences))
    ]


def _tf_matrix(tokens: list[list[str]]) -> np.ndarray:
    """Row i: sentence i's term frequencies divided by its token count (zeros when it has none)."""
    vocabulary: dict[str, int] = {}
    rows = [Counter(sentence) for sentence in tokens]
    for row in rows:
        for term in row:
            vocabulary.setdefault(term, len(vocabulary))
    matrix = np.zeros((len(tokens), max(1, len(vocabulary))))
    for index, (row, sentence) in enumerate(zip(rows, tokens, strict=True)):
        for term, count in row.items():
            matrix[index, vocabulary[term]] = count / len(sentence)
    return matrix


def _normalise_by_max(values: np.ndarray) -> np.ndarray:
    peak = values.max(initial=0.0)
    return values / peak if peak > 0 else values


def textrank_scores(frequencies: np.ndarray) -> np.ndarray:
    """PageRank (d=0.85, at most 100 iterations, stop when no score moves by 1e-5) over the cosine
    similarity of the sentences' TF vectors, normalised by the highest score."""
    count = frequencies.shape[0]
    if count == 1:
        return np.ones(1)
    norms = np.linalg.norm(frequencies, axis=1)
    unit = np.divide(
        frequencies, norms[:, None], out=np.zeros_like(frequencies), where=norms[:, None] > 0
    )
    weights = unit @ unit.T
    np.fill_diagonal(weights, 0.0)
    out = weights.sum(axis=1)
    # transition[j, i]: the share of sentence j's weight that flows to i; sentences without edges
    # pass nothing on, as upstream.
    transition = np.divide(
        weights, out[:, None], out=np.zeros_like(weights), where=out[:, None] > 0
    )
    scores = np.full(count, 1.0 / count)
    base = (1.0 - TEXTRANK_DAMPING) / count
    for _ in range(TEXTRANK_ITERATIONS):
        updated = base + TEXTRANK_DAMPING * (transition.T @ scores)
        delta = np.abs(updated - scores).max()
        scores = updated
        if delta < TEXTRANK_TOLERANCE:
            break
    return _normalise_by_max(scores)


def position_weights(count: int, depth: float) -> list[float]:
    """The U-shaped "lost in the middle" curve ``1 - depth * sin(pi * i / (n - 1))``."""
    if count == 1:
        return [1.0]
    depth = min(1.0, max(0.0, depth))
    return [1.0 - depth * math.sin(math.pi * index / (count - 1)) for index in range(count)]


def tfidf_scores(tokens: list[list[str]], frequencies: np.ndarray) -> np.ndarray:
    """Each sentence's mean TF-IDF, ``idf = ln((N + 1) / (df + 1))``, normalised by the highest."""
    documents = (frequencies > 0).sum(axis=0)
    idf = np.log((len(tokens) + 1) / (documents + 1))
    return _normalise_by_max(frequencies @ idf)


def novelty_scores(frequencies: np.ndarray) -> np.ndarray:
    """``1 - cos(tf, centroid)`` per sentence (0 for a sentence without tokens), normalised by the
    highest."""
    centroid = frequencies.mean(axis=0)
    norms = np.linalg.norm(frequencies, axis=1) * np.linalg.norm(centroid)
    cosine = np.divide(frequencies @ centroid, norms, out=np.zeros(len(norms)), where=norms > 0)
    novelty = np.where(norms > 0, 1.0 - cosine, 1.0)
    novelty[~frequencies.any(axis=1)] = 0.0
    return _normalise_by_max(novelty)


# --- selection ------------------------------------------------------------------------------------


class _Kept:
    """The kept sentences and the script-aware tokens of their output joined by spaces: for
    stripped texts joined by whitespace that count is a function of the summed CJK characters and
    words, so it is kept as running sums."""

    def __init__(self, sentences: list[str], budget: int):
        self.budget = budget
        self.stats = [cjk_and_words(sentence) for sentence in sentences]
        self.sums = (0, 0)
        self.indexes: set[int] = set()

    def keep_if_fits(self, index: int) -> None:
        if index in self.indexes:
            return
        sums = (self.sums[0] + self.stats[index][0], self.sums[1] + self.stats[index][1])
        if script_tokens(*sums) <= self.budget:
            self.sums = sums
            self.indexes.add(index)


def _select(
    sentences: list[str], scores: list[float], profile: SignalProfile, budget: int
) -> list[int]:
    """First N, then last N, then the rest by composite score, each only if the output still fits."""
    count = len(sentences)
    kept = _Kept(sentences, budget)
    for index in range(min(profile.preserve_first_n, count)):
        kept.keep_if_fits(index)
    for index in range(max(0, count - profile.preserve_last_n), count):
        kept.keep_if_fits(index)
    # Rounded so that float noise cannot reorder equal scores; ties keep the earlier sentence.
    for index in sorted(range(count), key=lambda index: (-round(scores[index], 12), index)):
        kept.keep_if_fits(index)
    return sorted(kept.indexes)
