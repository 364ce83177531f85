"""Fit the local judge's calibration on Cranfield, so that ``min_score: 0.5`` means what it says.

    .venv/bin/python -m scripts.calibrate_judge [--top-k 20] [--embedder auto|project|fastembed]

For each of the 225 queries, the top ``--top-k`` of the 1,400 abstracts (title + text) by cosine
are the candidates, as the judge sees them after the default embedding recall; cranqrel labels
them (any listed pair is relevant). The features are what the judge receives in production: the
embedder's cosine, and the BM25 score of ``sources.lexical`` (bm25s, English stop words and
stemming) over the whole collection, min-max normalised over each query's candidates. A plain
logistic regression (Newton's method, no dependency) maps the ranking signal
``0.8 · cosine + 0.2 · bm25`` to a probability; a second one maps BM25 alone, for candidates
without a cosine.

It prints: held-out accuracy and calibration (two folds, odd and even queries) of the stored form
and of alternatives, the constants fitted on all queries with their reliability table and
accuracy at 0.5, the fallback where the judge computes BM25 itself, a ranking check (nDCG@10
within the candidates), and the lines to paste into ``sources/judge.py``.

It runs with the project's settings (``DJANGO_SETTINGS_MODULE``, default
``contextplatform.settings``). Embeddings come from the project's embedder
(``sources.embedding.get_embedder``); ``--embedder fastembed`` (or ``auto`` when the project's
fails) loads fastembed offline exactly as ``docs/models.md`` describes.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scripts import cranfield
from sources.judge import (
    BM25_WEIGHT,
    COSINE_WEIGHT,
    Bm25,
    Calibration,
    min_max,
)

EmbedFn = Callable[[list[str]], Any]  # texts -> numpy array (n, dims) of unit vectors


@dataclass(frozen=True)
class Sample:
    query_id: int
    doc_id: int
    cosine: float
    bm25: float  # min-max over the query's candidates: sources.lexical BM25 over the collection
    bm25_local: float  # the same, sources.judge.Bm25 over the candidates (the judge's fallback)
    relevant: bool

    @property
    def signal(self) -> float:
        return COSINE_WEIGHT * self.cosine + BM25_WEIGHT * self.bm25


# --------------------------------------------------------------------------------------------
# Embeddings.


def setup_django() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")
    django.setup()
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def project_embedder() -> tuple[str, EmbedFn]:
    import numpy as np

    from sources.embedding import get_embedder

    embedder = get_embedder()
    return embedder.identity, lambda texts: np.asarray(embedder.embed(texts), dtype=np.float32)


def fastembed_embedder() -> tuple[str, EmbedFn]:
    """The project's local model (``sources.embedding.LocalMiniLMEmbedder``: fastembed, offline,
    as ``docs/models.md`` describes) in a folder of its own, whatever the settings choose."""
    import numpy as np

    from sources.embedding import LocalMiniLMEmbedder

    folder = Path(tempfile.mkdtemp(prefix="minilm-")) / "model"
    embedder = LocalMiniLMEmbedder(model_dir=folder, batch_size=32)
    return embedder.identity, lambda texts: np.asarray(embedder.embed(texts), dtype=np.float32)


def choose_embedder(kind: str) -> tuple[str, EmbedFn]:
    if kind == "fastembed":
        return fastembed_embedder()
    try:
        return project_embedder()
    except Exception as error:
        if kind == "project":
            raise
        print(f"project embedder unavailable ({type(error).__name__}: {error}); using fastembed")
        return fastembed_embedder()


def unit_rows(matrix: Any) -> Any:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


# --------------------------------------------------------------------------------------------
# Candidates and labels.


def collection_bm25(texts: list[str]) -> Any:
    """The project's lexical index (``sources.lexical``: bm25s, stop words, stemming) over texts."""
    import bm25s
    import numpy as np

    from sources.lexical import LexicalIndex, tokenize

    retriever = bm25s.BM25()
    retriever.index(tokenize(texts), show_progress=False)
    ids = np.arange(len(texts), dtype=np.int64)
    return LexicalIndex(chunk_ids=ids, metadata=[{}] * len(texts), retriever=retriever, position={})


def build_samples(data: cranfield.Cranfield, embed: EmbedFn, top_k: int) -> list[Sample]:
    import numpy as np

    started = time.perf_counter()
    documents = unit_rows(embed([document.content for document in data.documents]))
    queries = unit_rows(embed([query.text for query in data.queries]))
    print(f"embedded {len(documents)} documents and {len(queries)} queries ", end="")
    print(f"in {time.perf_counter() - started:.1f} s")
    cosines = queries @ documents.T
    collection = collection_bm25([document.content for document in data.documents])
    samples = []
    for row, query in enumerate(data.queries):
        top = np.argsort(-cosines[row])[:top_k]
        docs = [data.documents[int(index)] for index in top]
        collection_scores = collection.scores(query.text)
        bm25 = min_max([float(collection_scores[int(index)]) for index in top])
        local = min_max(Bm25([document.content for document in docs]).scores(query.text))
        relevant = data.relevant(query.id)
        samples += [
            Sample(
                query_id=query.id,
                doc_id=document.id,
                cosine=float(cosines[row, int(index)]),
                bm25=bm25[rank],
                bm25_local=local[rank],
                relevant=document.id in relevant,
            )
            for rank, (index, document) in enumerate(zip(top, docs, strict=True))
        ]
    return samples


# --------------------------------------------------------------------------------------------
# Logistic regression by Newton's method (a handful of features, a few thousand rows).


def sigmoid(z: float) -> float:
    return Calibration(slope=1.0, intercept=0.0).probability(z)


def fit_logistic(rows: Sequence[Sequence[float]], labels: Sequence[bool]) -> list[float]:
    """Weights ``[w1..wd, bias]`` maximising the likelihood (tiny ridge for stability)."""
    width = len(rows[0]) + 1
    weights = [0.0] * width
    for _ in range(100):
        gradient = [0.0] * width
        hessian = [[1e-6 * (i == j) for j in range(width)] for i in range(width)]
        for row, label in zip(rows, labels, strict=True):
            x = [*row, 1.0]
            p = sigmoid(sum(w * v for w, v in zip(weights, x, strict=True)))
            for i in range(width):
                gradient[i] += (p - label) * x[i]
                for j in range(width):
                    hessian[i][j] += p * (1 - p) * x[i] * x[j]
        step = solve(hessian, gradient)
        weights = [w - s for w, s in zip(weights, step, strict=True)]
        if max(abs(s) for s in step) < 1e-9:
            break
    return weights


def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting."""
    size = len(vector)
    a = [[*row, value] for row, value in zip(matrix, vector, strict=True)]
    for column in range(size):
        pivot = max(range(column, size), key=lambda r: abs(a[r][column]))
        a[column], a[pivot] = a[pivot], a[column]
        for r in range(column + 1, size):
            factor = a[r][column] / a[column][column]
            a[r] = [x - factor * y for x, y in zip(a[r], a[column], strict=True)]
    result = [0.0] * size
    for r in reversed(range(size)):
        known = sum(a[r][c] * result[c] for c in range(r + 1, size))
        result[r] = (a[r][size] - known) / a[r][r]
    return result


@dataclass(frozen=True)
class Model:
    """A named feature map and its fitted weights."""

    name: str
    features: Callable[[Sample], list[float]]
    weights: tuple[float, ...] = ()

    def fit(self, samples: Sequence[Sample]) -> Model:
        rows = [self.features(sample) for sample in samples]
        weights = fit_logistic(rows, [sample.relevant for sample in samples])
        return replace(self, weights=tuple(weights))

    def predict(self, sample: Sample) -> float:
        x = [*self.features(sample), 1.0]
        return sigmoid(sum(w * v for w, v in zip(self.weights, x, strict=True)))


COMBINED = Model("combined: 0.8*cos + 0.2*bm25", lambda s: [s.signal])
LEXICAL = Model("lexical: bm25 only", lambda s: [s.bm25])
TWO_FEATURE = Model("two features: cos, bm25", lambda s: [s.cosine, s.bm25])
COSINE_ONLY = Model("cosine only", lambda s: [s.cosine])


# --------------------------------------------------------------------------------------------
# Reports.


def reliability(predictions: Sequence[float], labels: Sequence[bool], bins: int = 10) -> str:
    lines = ["  predicted      n   mean pred   observed"]
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        chosen = [
            (p, y)
            for p, y in zip(predictions, labels, strict=True)
            if low <= p < high or (b == bins - 1 and p == 1.0)
        ]
        if not chosen:
            continue
        mean_p = sum(p for p, _ in chosen) / len(chosen)
        observed = sum(y for _, y in chosen) / len(chosen)
        lines.append(f"  {low:.1f}-{high:.1f}  {len(chosen):6d}   {mean_p:9.3f}   {observed:8.3f}")
    return "\n".join(lines)


def metrics(predictions: Sequence[float], labels: Sequence[bool]) -> dict[str, float]:
    n = len(labels)
    kept = [p >= 0.5 for p in predictions]
    true_kept = sum(k and y for k, y in zip(kept, labels, strict=True))
    eps = 1e-12
    return {
        "accuracy@0.5": sum(k == y for k, y in zip(kept, labels, strict=True)) / n,
        "always-no accuracy": sum(not y for y in labels) / n,
        "precision@0.5": true_kept / max(1, sum(kept)),
        "recall@0.5": true_kept / max(1, sum(labels)),
        "log loss": -sum(
            math.log(max(p, eps)) if y else math.log(max(1 - p, eps))
            for p, y in zip(predictions, labels, strict=True)
        )
        / n,
        "brier": sum((p - y) ** 2 for p, y in zip(predictions, labels, strict=True)) / n,
        "ECE": expected_calibration_error(predictions, labels),
    }


def expected_calibration_error(
    predictions: Sequence[float], labels: Sequence[bool], bins: int = 10
) -> float:
    total = 0.0
    for b in range(bins):
        chosen = [
            (p, y)
            for p, y in zip(predictions, labels, strict=True)
            if b / bins <= p < (b + 1) / bins or (b == bins - 1 and p == 1.0)
        ]
        if chosen:
            gap = sum(p for p, _ in chosen) - sum(y for _, y in chosen)
            total += abs(gap)
    return total / len(labels)


def print_metrics(predictions: Sequence[float], labels: Sequence[bool]) -> None:
    values = metrics(predictions, labels)
    print("  " + "  ".join(f"{name} {value:.3f}" for name, value in values.items()))


def cross_validate(model: Model, samples: Sequence[Sample]) -> tuple[list[float], list[bool]]:
    """Two folds by query parity: each half is predicted by the model fitted on the other."""
    predictions, labels = [], []
    for parity in (0, 1):
        train = [s for s in samples if s.query_id % 2 != parity]
        test = [s for s in samples if s.query_id % 2 == parity]
        fitted = model.fit(train)
        predictions += [fitted.predict(s) for s in test]
        labels += [s.relevant for s in test]
    return predictions, labels


def ndcg_at_10(
    samples: Sequence[Sample], data: cranfield.Cranfield, key: Callable[[Sample], float]
) -> float:
    """Mean binary nDCG@10 of each query's candidates reordered by ``key``."""
    by_query: dict[int, list[Sample]] = {}
    for sample in samples:
        by_query.setdefault(sample.query_id, []).append(sample)
    total = 0.0
    for query_id, group in by_query.items():
        ranked = sorted(group, key=key, reverse=True)[:10]
        dcg = sum(s.relevant / math.log2(rank + 2) for rank, s in enumerate(ranked))
        ideal = sum(
            1 / math.log2(rank + 2) for rank in range(min(10, len(data.relevant(query_id))))
        )
        total += dcg / ideal if ideal else 0.0
    return total / len(by_query)


def ranking_report(samples: Sequence[Sample], data: cranfield.Cranfield) -> None:
    by_query: dict[int, list[Sample]] = {}
    for sample in samples:
        by_query.setdefault(sample.query_id, []).append(sample)
    cos_mm = {}
    for group in by_query.values():
        for sample, value in zip(group, min_max([s.cosine for s in group]), strict=True):
            cos_mm[(sample.query_id, sample.doc_id)] = value
    keys: dict[str, Callable[[Sample], float]] = {
        "cosine": lambda s: s.cosine,
        "0.8*cos + 0.2*bm25 (the judge)": lambda s: s.signal,
        "0.8*cos + 0.2*bm25 (candidate BM25)": lambda s: 0.8 * s.cosine + 0.2 * s.bm25_local,
        "0.8*minmax(cos) + 0.2*bm25": lambda s: 0.8 * cos_mm[(s.query_id, s.doc_id)] + 0.2 * s.bm25,
        "bm25": lambda s: s.bm25,
    }
    for name, key in keys.items():
        print(f"  {name:38s} {ndcg_at_10(samples, data, key):.4f}")


def kept_per_query(model: Model, samples: Sequence[Sample]) -> None:
    """What ``min_score: 0.5`` keeps per query, and how often each query's best is relevant."""
    by_query: dict[int, list[Sample]] = {}
    for sample in samples:
        by_query.setdefault(sample.query_id, []).append(sample)
    kept = [sum(model.predict(s) >= 0.5 for s in group) for group in by_query.values()]
    best = [max(group, key=model.predict).relevant for group in by_query.values()]
    print(
        f"  combined at 0.5: {sum(kept) / len(kept):.2f} kept per query, "
        f"{sum(k > 0 for k in kept)} of {len(kept)} queries keep any; "
        f"each query's best candidate is relevant {sum(best) / len(best):.1%} of the time"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--embedder", choices=("auto", "project", "fastembed"), default="auto")
    parser.add_argument("--data", default=None, help="Cranfield folder (default: shared data)")
    args = parser.parse_args(argv)

    data = cranfield.load(args.data)
    setup_django()
    identity, embed = choose_embedder(args.embedder)
    print(f"embedder: {identity}")
    samples = build_samples(data, embed, args.top_k)
    labels = [s.relevant for s in samples]
    print(
        f"{len(samples)} candidates ({len(data.queries)} queries x top {args.top_k} by cosine), "
        f"{sum(labels)} relevant ({sum(labels) / len(labels):.1%})"
    )

    print("\nHeld-out (2 folds by query parity): accuracy and calibration per model")
    for model in (COMBINED, LEXICAL, TWO_FEATURE, COSINE_ONLY):
        predictions, fold_labels = cross_validate(model, samples)
        print(f"{model.name}")
        print_metrics(predictions, fold_labels)

    print("\nHeld-out reliability, combined")
    predictions, fold_labels = cross_validate(COMBINED, samples)
    print(reliability(predictions, fold_labels))

    combined, lexical = COMBINED.fit(samples), LEXICAL.fit(samples)
    print("\nFitted on all queries")
    for model in (combined, lexical):
        slope, intercept = model.weights
        print(f"{model.name}: slope {slope:.4f} intercept {intercept:.4f}")
        print(f"  signal at p = 0.5: {-intercept / slope:.4f}")
        model_predictions = [model.predict(s) for s in samples]
        print(reliability(model_predictions, labels))
        print_metrics(model_predictions, labels)

    kept_per_query(combined, samples)

    print("\nCombined with BM25 computed over the candidates only (the judge's fallback)")
    local = [combined.predict(replace(s, bm25=s.bm25_local)) for s in samples]
    print_metrics(local, labels)

    print(f"\nRanking check: nDCG@10 (binary) within each query's top {args.top_k}")
    ranking_report(samples, data)

    print("\nPaste into sources/judge.py:")
    print(
        f"COMBINED = Calibration(slope={combined.weights[0]:.4f}, intercept={combined.weights[1]:.4f})"
    )
    print(
        f"LEXICAL = Calibration(slope={lexical.weights[0]:.4f}, intercept={lexical.weights[1]:.4f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
