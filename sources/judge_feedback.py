"""Relevance feedback for the local judge's order: the query moved toward its best candidates.

The judge's signal reads each candidate against the query alone; the candidates the signal ranks
first say more about what the query is after (Rocchio's relevance feedback, taken blind: the first
``depth`` are assumed relevant). The query vector ``q`` becomes ``q' = q + mean(f)`` over those
feedback vectors ``f`` (Rocchio with both weights 1, the usual setting for dense vectors), and each
candidate ``d`` is read by its cosine to ``q'``:

    cos(d, q') = (cos(d, q) + mean_k d·f_k) / |q'|,  |q'|² = 1 + 2 mean_k cos(f_k, q) + |mean f|²

Everything here is known without the query's own vector: the candidates' cosines to the query
(the recall's) and their unit vectors (the stored chunk embeddings).

Pure (numpy only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# Candidates taken as feedback by default: three, the common depth of blind feedback for dense
# retrieval; the first of a recall are the likeliest to be relevant, and a deeper pool drifts.
DEPTH = 3


def feedback_cosines(
    cosines: Sequence[float],
    vectors: Sequence[npt.ArrayLike],
    order: Sequence[int],
    depth: int = DEPTH,
) -> list[float] | None:
    """Each candidate's cosine to the query moved toward the ``depth`` candidates first in
    ``order`` (indexes into the candidates, best first). ``vectors`` are the candidates' unit
    embeddings, ``cosines`` their cosines to the query. None when there is nothing to move by
    (``depth`` 0, no candidate) or the vectors are not one shape."""
    if depth <= 0 or not cosines:
        return None
    try:
        matrix = np.asarray([np.asarray(v, dtype=np.float64) for v in vectors], dtype=np.float64)
    except ValueError:
        return None
    if matrix.ndim != 2 or matrix.shape[0] != len(cosines) or not np.all(np.isfinite(matrix)):
        return None
    chosen = list(order[:depth])
    query = np.asarray(cosines, dtype=np.float64)
    centre = matrix[chosen].mean(axis=0)
    norm_squared = 1.0 + 2.0 * float(query[chosen].mean()) + float(centre @ centre)
    if norm_squared <= 1e-12:
        return None
    moved = (query + matrix @ centre) / np.sqrt(norm_squared)
    return [float(value) for value in moved]
