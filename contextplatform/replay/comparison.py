"""The arms of a route's traffic split compared over a recent window of its replay records:
requests, mean tokens sent, median latency, mean kept items, and the applications' feedback.
One aggregate query; every arm the route has is listed, those without records as empty."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from contextplatform.replay.models import Feedback, ReplayRecord

WINDOWS_DAYS = (1, 7, 30)
DEFAULT_WINDOW_DAYS = 7


@dataclass(frozen=True)
class ArmStats:
    arm: str
    weight: float
    requests: int = 0
    mean_tokens: float | None = None
    p50_ms: float | None = None
    mean_kept: float | None = None
    feedback: int = 0
    up: int = 0
    down: int = 0
    mean_score: float | None = None
    # The arm's evaluation metrics (hit rate, kept precision...), when the route has an
    # evaluation set and a run scored this arm; None otherwise (shown as "—").
    evaluation: dict[str, Any] | None = None


# The evaluation hook: a function (route, arm) → that arm's latest evaluation metrics, or None.
# Evaluation sets, which lie above this app, set it when they are loaded (their AppConfig.ready);
# unset, every arm shows "—".
EvaluationMetrics = Callable[[str, str], dict[str, Any] | None]
evaluation_metrics: EvaluationMetrics | None = None

_QUERY = """
SELECT r.variant,
       count(*),
       avg((r.tokens ->> 'after')::double precision),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.duration_ms),
       avg((SELECT count(*) FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(r.items) = 'array' THEN r.items ELSE '[]'::jsonb END
            ) AS item WHERE item ->> 'kept' = 'true')),
       count(f.id),
       count(f.id) FILTER (WHERE f.score > 0),
       count(f.id) FILTER (WHERE f.score < 0),
       avg(f.score)
  FROM {records} AS r
  LEFT JOIN {feedback} AS f ON f.record_id = r.id
 WHERE r.route = %s AND r.created_at >= %s
 GROUP BY r.variant
"""


def compare_arms(
    route: str, arms: Sequence[tuple[str, float]], *, days: int = DEFAULT_WINDOW_DAYS
) -> list[ArmStats]:
    """The route's arms (name, weight; ``main`` first) over the last ``days`` days, then any arm
    its records name that it no longer has (a variant since removed)."""
    since = timezone.now() - timedelta(days=days)
    query = _QUERY.format(
        records=connection.ops.quote_name(ReplayRecord._meta.db_table),
        feedback=connection.ops.quote_name(Feedback._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [route, since])
        rows = {row[0] or "main": row[1:] for row in cursor.fetchall()}
    weights = dict(arms)
    names = [name for name, _ in arms] + sorted(set(rows) - set(weights))
    return [_stats(route, name, weights.get(name, 0.0), rows.get(name)) for name in names]


def _stats(route: str, arm: str, weight: float, row: Sequence[Any] | None) -> ArmStats:
    evaluation = evaluation_metrics(route, arm) if evaluation_metrics is not None else None
    if row is None:
        return ArmStats(arm=arm, weight=weight, evaluation=evaluation)
    requests, tokens, p50, kept, feedback, up, down, score = row
    return ArmStats(
        arm=arm,
        weight=weight,
        requests=requests,
        mean_tokens=_number(tokens),
        p50_ms=_number(p50),
        mean_kept=_number(kept),
        feedback=feedback,
        up=up,
        down=down,
        mean_score=_number(score),
        evaluation=evaluation,
    )


def _number(value: Any) -> float | None:
    return None if value is None else round(float(value), 2)
