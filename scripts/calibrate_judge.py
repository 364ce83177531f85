"""The local judge's prior, measured the way every collection measures its own calibration.

    .venv/bin/python -m scripts.calibrate_judge [--vectors FILE]

The prior (``sources.judge_calibration.PRIOR``) serves what has no calibration of its own: a
collection of one document, memories, external backends. It is computed here exactly as
``sources/calibration.py`` computes a collection's, on Cranfield's 1,400 abstracts, from the
abstracts alone: sentences from inside the documents stand for questions, held against their own
document and random others (no relevance labels are read to fit it). The same is done for the
demo's support articles, a collection of another domain, to show how close the two land.

Then, for information only, cranqrel judges what the default match block keeps with the prior:
documents kept per query, their precision, nDCG of the kept documents against bm25s's top 6.
``make bench`` (section 4) measures the same through the platform itself.

Paste the printed ``PRIOR = ...`` block into ``sources/judge_calibration.py`` after changing the
embedder, the signal or the pseudo-queries.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scripts import cranfield
from scripts.bench_retrieval import KEEP, graded_gain, ndcg_at

TOP_K = 20


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")
    import django

    django.setup()


def chunk_texts(data: cranfield.Cranfield) -> tuple[list[str], list[str]]:
    """(bodies, indexed texts): the body a sentence is drawn from, and ``title\\nbody`` as the
    platform indexes and the judge reads a chunk."""
    bodies, indexed = [], []
    for document in data.documents:
        title, text = document.title, document.text
        if title and text.startswith(title):
            text = text[len(title) :].strip()
        bodies.append(text)
        indexed.append(f"{title}\n{text}" if title else text)
    return bodies, indexed


def calibration_for(
    bodies: Sequence[str],
    indexed: Sequence[str],
    vectors: np.ndarray,
    embed: object,
    origin: str,
    seed: int = 0,
) -> object:
    """``sources.calibration.measure`` on arrays: each abstract is its own document and the
    recall is an exact top 20 by cosine."""
    from sources.judge_calibration import calibrate, candidate_set, pseudo_queries

    queries = pseudo_queries(bodies, seed=seed)
    query_vectors = np.asarray(embed([query.text for query in queries]), dtype=np.float32)  # type: ignore[operator]
    pool = list(enumerate(indexed))
    documents = range(len(indexed))
    draw = random.Random(seed + 1)
    candidates = []
    for query, vector in zip(queries, query_vectors, strict=True):
        scores = vectors @ vector
        cosines = scores.tolist()
        recalled = ((int(i), indexed[i], cosines[i]) for i in np.argsort(-scores)[:TOP_K])
        candidates.append(candidate_set(query.owner, pool, documents, cosines, recalled, draw))
    return calibrate(queries, candidates, documents=len(indexed), origin=origin)


def cranfield_check(
    data: cranfield.Cranfield, indexed: list[str], vectors: np.ndarray, embed: object, prior: object
) -> None:
    import bm25s
    import Stemmer

    from sources.judge import JudgeCandidate, LocalJudge

    stemmer = Stemmer.Stemmer("english")
    index = bm25s.BM25()
    index.index(
        bm25s.tokenize(indexed, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    ids = [document.id for document in data.documents]
    queries = np.asarray(embed([q.text for q in data.queries]), dtype=np.float32)  # type: ignore[operator]
    judge = LocalJudge()
    kept_counts, precisions, gains, baseline, empty = [], [], [], [], 0
    for query, vector in zip(data.queries, queries, strict=True):
        terms = bm25s.tokenize(
            [query.text], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
        )[0]
        raw = index.get_scores(terms)
        cosines = vectors @ vector
        top = [int(i) for i in np.argsort(-cosines)[:TOP_K]]
        scores = judge.score_sync(
            query.text,
            [
                JudgeCandidate(
                    text=indexed[i], cosine=float(cosines[i]), bm25=float(raw[i]), calibration=prior
                )  # type: ignore[arg-type]
                for i in top
            ],
        )
        order = sorted(range(len(top)), key=lambda j: -scores[j])
        kept = [ids[top[j]] for j in order if scores[j] >= 0.5][:KEEP]
        judged = data.qrels[query.id]
        kept_counts.append(len(kept))
        empty += not kept
        if kept:
            precisions.append(sum(d in judged for d in kept) / len(kept))
        gains.append(ndcg_at(kept, judged, graded_gain, KEEP))
        baseline.append(
            ndcg_at([ids[int(i)] for i in np.argsort(-raw)[:KEEP]], judged, graded_gain, KEEP)
        )
    print(
        f"cranfield, default block on the prior: {np.mean(kept_counts):.2f} kept per query, "
        f"precision {np.mean(precisions):.3f}, {empty} queries keep nothing, kept nDCG "
        f"{np.mean(gains):.4f} vs bm25s top {KEEP} {np.mean(baseline):.4f} "
        f"(x{np.mean(gains) / np.mean(baseline):.3f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=Path, help="cache of the abstracts' vectors (.npy)")
    args = parser.parse_args(argv)
    setup_django()
    from contextplatform.demo.defaults import DEMO_DOCUMENTS
    from sources.embedding import get_embedder

    embedder = get_embedder()
    data = cranfield.load()
    bodies, indexed = chunk_texts(data)
    if args.vectors and args.vectors.exists():
        vectors = np.load(args.vectors)
    else:
        vectors = np.asarray(embedder.embed(indexed), dtype=np.float32)
        if args.vectors:
            np.save(args.vectors, vectors)
    prior = calibration_for(
        bodies,
        indexed,
        vectors,
        embedder.embed,
        "prior (the local embedder's, measured on Cranfield's abstracts)",
    )
    kb_indexed = [f"{d['title']}\n{d['text']}" for d in DEMO_DOCUMENTS]
    kb = calibration_for(
        [d["text"] for d in DEMO_DOCUMENTS],
        kb_indexed,
        np.asarray(embedder.embed(kb_indexed), dtype=np.float32),
        embedder.embed,
        "collection support-kb",
    )
    for name, found in (("cranfield", prior), ("support-kb", kb)):
        combined = found.combined  # type: ignore[attr-defined]
        print(
            f"{name}: match {combined.match_mean:.4f} background {combined.background_mean:.4f} "
            f"spread {combined.spread:.4f} midpoint {combined.midpoint:.4f} "
            f"({found.pseudo_queries} pseudo-queries)"  # type: ignore[attr-defined]
        )
    print("\nPRIOR = JudgeCalibration(")
    for field in ("combined", "lexical"):
        model = getattr(prior, field)
        print(
            f"    {field}=Discriminant(match_mean={model.match_mean:.4f}, "
            f"background_mean={model.background_mean:.4f}, spread={model.spread:.4f}),"
        )
    print(f"    pseudo_queries={prior.pseudo_queries},")  # type: ignore[attr-defined]
    print(f"    documents={prior.documents},")  # type: ignore[attr-defined]
    print(f'    origin="{prior.origin}",')  # type: ignore[attr-defined]
    print(")\n")
    cranfield_check(data, indexed, vectors, embedder.embed, prior)
    return 0


if __name__ == "__main__":
    sys.exit(main())
