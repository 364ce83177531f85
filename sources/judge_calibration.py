"""What the local judge's scores mean in one collection, learned from the collection itself.

No collection comes with relevance labels, and a cosine means different things in different
collections: in a narrow technical one every document sits close to every query (unrelated pairs
at 0.2, answers at 0.6), in a broad one unrelated pairs sit near 0.1 and a short question meets
its answer at 0.3. So the judge learns, per collection, two reference levels from the collection's
own structure:

* a **match**: a sentence taken from inside a document (standing for a question about one of its
  details) against the document it came from;
* **no match**: the same sentence against random other documents of the collection.

Each pair gets the judge's ranking signal exactly as at request time (``0.8 · cosine + 0.2 ·
BM25`` min-max normalised over the pseudo-query's candidates: its top recall, its own document and
the random ones). A two-class Gaussian model with one pooled spread (linear discriminant) turns a
signal into ``P(match)`` with even prior odds: **a score of 0.5 is a candidate halfway between
how this collection's documents match a question about themselves and how a random document of
the collection matches it**; above is closer to the first. The same model over BM25 alone serves
candidates without a cosine.

Pure: the I/O (sentences sampled from stored chunks, their recall, the background chunks) lives in
``sources/calibration.py``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sources.judge_lexical import bm25_signal_texts

# The ranking signal: docs/models.md found 0.8 · cosine + 0.2 · BM25 (min-max over the candidates)
# the best local ranker on the embedder's top 20.
COSINE_WEIGHT = 0.8
BM25_WEIGHT = 0.2

PSEUDO_QUERY_LIMIT = 200  # sentences per calibration: enough for stable means, ~1-2 s to embed
BACKGROUNDS_PER_QUERY = 4  # random other documents each pseudo-query is held against
MIN_WORDS = 5  # shorter sentences ("See below.") say too little to stand for a question
MAX_WORDS = 60
# A sentence that is most of its chunk matches it trivially (a one-line document against itself):
# it would set the match level at a cosine no question reaches. Such sentences are not used.
MAX_SHARE_OF_CHUNK = 0.5
# The pooled spread is floored so that a tiny or very regular collection cannot make the score a
# step function of the third decimal of a cosine.
MIN_SPREAD = 0.03
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class Discriminant:
    """``P(match | x)`` for two Gaussian classes with one pooled spread and even prior odds."""

    match_mean: float
    background_mean: float
    spread: float

    @property
    def midpoint(self) -> float:
        """Where the score is 0.5."""
        return (self.match_mean + self.background_mean) / 2

    def probability(self, value: float) -> float:
        slope = (self.match_mean - self.background_mean) / (self.spread * self.spread)
        z = slope * (value - self.midpoint)
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    @classmethod
    def fitted(cls, matches: Sequence[float], backgrounds: Sequence[float]) -> Discriminant:
        match_mean, background_mean = _mean(matches), _mean(backgrounds)
        squares = sum((x - match_mean) ** 2 for x in matches) + sum(
            (x - background_mean) ** 2 for x in backgrounds
        )
        spread = math.sqrt(squares / max(1, len(matches) + len(backgrounds) - 2))
        return cls(match_mean, background_mean, max(spread, MIN_SPREAD))


@dataclass(frozen=True)
class JudgeCalibration:
    """The local judge's two models for one collection (or the embedder's prior)."""

    combined: Discriminant  # over 0.8 · cosine + 0.2 · bm25
    lexical: Discriminant  # over bm25 alone, for candidates without a cosine
    pseudo_queries: int
    documents: int
    origin: str  # "collection <name> v<version>", or "prior (<why>)"

    def probability(self, cosine: float | None, bm25_normalised: float) -> float:
        if cosine is None:
            return self.lexical.probability(bm25_normalised)
        return self.combined.probability(signal(cosine, bm25_normalised))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeCalibration:
        return cls(
            combined=Discriminant(**data["combined"]),
            lexical=Discriminant(**data["lexical"]),
            pseudo_queries=int(data["pseudo_queries"]),
            documents=int(data["documents"]),
            origin=str(data["origin"]),
        )

    def summary(self) -> dict[str, Any]:
        """What the replay record and the preview show of it."""
        return {
            "from": self.origin,
            "midpoint": round(self.combined.midpoint, 4),
            "match_mean": round(self.combined.match_mean, 4),
            "background_mean": round(self.combined.background_mean, 4),
            "pseudo_queries": self.pseudo_queries,
        }


def signal(cosine: float, bm25_normalised: float) -> float:
    cosine = max(-1.0, min(1.0, cosine))
    return COSINE_WEIGHT * cosine + BM25_WEIGHT * bm25_normalised


# The prior: what `python -m scripts.calibrate_judge` printed for the local embedder
# (all-MiniLM-L6-v2 int8) over Cranfield's 1,400 abstracts, from the abstracts alone (no relevance
# labels). It serves collections not yet calibrated (fewer than two documents, or filled before
# calibrations existed), memories, and external backends. The demo's support articles give nearly
# the same midpoint (0.403 against 0.393), a narrow technical collection and a broad one alike.
PRIOR = JudgeCalibration(
    combined=Discriminant(match_mean=0.6211, background_mean=0.1645, spread=0.1154),
    lexical=Discriminant(match_mean=1.0000, background_mean=0.0714, spread=0.0665),
    pseudo_queries=200,
    documents=1400,
    origin="prior (the local embedder's, measured on Cranfield's abstracts)",
)


# --- building one ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PseudoQuery:
    text: str
    owner: int  # index of the document the sentence came from


@dataclass(frozen=True)
class Candidate:
    """One pair as the judge would see it: the pseudo-query against a chunk."""

    text: str
    cosine: float
    role: str  # "own" (the sentence's document), "background" (random other), "recalled"


def sentences(text: str) -> list[str]:
    """The sentences of a document's text that can stand for a question about it: long enough
    to say something, and a part of the text rather than most of it."""
    total = len(text.split())
    found = []
    for piece in SENTENCE.split(text):
        words = piece.split()
        if MIN_WORDS <= len(words) <= MAX_WORDS and len(words) <= MAX_SHARE_OF_CHUNK * total:
            found.append(" ".join(words))
    return found


def pseudo_queries(
    documents: Sequence[str], *, limit: int = PSEUDO_QUERY_LIMIT, seed: int = 0
) -> list[PseudoQuery]:
    """Up to ``limit`` sentences, spread over the documents: one from the middle of each document
    in a shuffled order first, then further sentences of each in turn, so a small collection still
    gives enough and a large one is sampled evenly."""
    per_document = [sentences(text) for text in documents]
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    chosen: list[PseudoQuery] = []
    round_index = 0
    while len(chosen) < limit:
        added = False
        for owner in order:
            found = per_document[owner]
            if round_index < len(found):
                # the middle sentence first: openings often restate the title
                pick = (len(found) // 2 + round_index) % len(found)
                chosen.append(PseudoQuery(found[pick], owner))
                added = True
                if len(chosen) == limit:
                    break
        if not added:
            break
        round_index += 1
    return chosen


def candidate_set(
    owner: int,
    pool: Sequence[tuple[Hashable, str]],
    documents: Sequence[Hashable],
    cosines: Sequence[float],
    recalled: Iterable[tuple[Hashable, str, float]],
    draw: random.Random,
) -> list[Candidate]:
    """A pseudo-query's candidates as the judge would see them. ``pool`` holds the sampled chunks
    (key, text as the judge reads it) with each one's document and the pseudo-query's cosine to
    it; ``owner`` is the pool index its sentence came from. The set is its recall (keyed as the
    pool is; its own chunk is not counted as recalled), its own chunk, and up to
    ``BACKGROUNDS_PER_QUERY`` random chunks of other documents drawn from the pool; a chunk
    appears once, in the last role given to it."""
    own_key, own_text = pool[owner]
    found = {
        key: Candidate(text, cosine, "recalled") for key, text, cosine in recalled if key != own_key
    }
    found[own_key] = Candidate(own_text, float(cosines[owner]), "own")
    own_document = documents[owner]
    others = [i for i, document in enumerate(documents) if document != own_document]
    for index in draw.sample(others, min(BACKGROUNDS_PER_QUERY, len(others))):
        key, text = pool[index]
        found[key] = Candidate(text, float(cosines[index]), "background")
    return list(found.values())


def calibrate(
    queries: Sequence[PseudoQuery],
    candidates: Sequence[Sequence[Candidate]],
    *,
    documents: int,
    origin: str,
) -> JudgeCalibration | None:
    """Fit both models from each pseudo-query's candidates (``candidates[i]`` for ``queries[i]``,
    holding its own document once, its background documents, and its recall). BM25 is min-max
    normalised over each pseudo-query's candidates, as the judge does over a request's. None when
    the collection gives no background (a single document) or no sentence."""
    own_signals: list[float] = []
    background_signals: list[float] = []
    own_lexical: list[float] = []
    background_lexical: list[float] = []
    for query, found in zip(queries, candidates, strict=True):
        if not found:
            continue
        lexical = bm25_signal_texts(query.text, [candidate.text for candidate in found])
        for candidate, bm25 in zip(found, lexical, strict=True):
            if candidate.role == "own":
                own_signals.append(signal(candidate.cosine, bm25))
                own_lexical.append(bm25)
            elif candidate.role == "background":
                background_signals.append(signal(candidate.cosine, bm25))
                background_lexical.append(bm25)
    if not own_signals or not background_signals:
        return None
    return JudgeCalibration(
        combined=Discriminant.fitted(own_signals, background_signals),
        lexical=Discriminant.fitted(own_lexical, background_lexical),
        pseudo_queries=len(own_signals),
        documents=documents,
        origin=origin,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
