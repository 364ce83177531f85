"""Each source's health onto ``/metrics`` (``metrics.set_source_health``), after its records are
written. The baseline (a week of minutes) moves slowly: each process keeps it for a minute per
source, so a batch costs one query over the last hour's minutes and one over the runs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable

from cachetools import TTLCache
from django.db import connection

from contextplatform.core import metrics
from contextplatform.replay.source_health.compute import (
    Pair,
    SourceHealth,
    baseline_counts,
    source_health,
)
from contextplatform.replay.source_health.rules import Counts

logger = logging.getLogger("contextplatform.replay")

BASELINE_KEPT_S = 60.0

# Keyed by tenant schema, route and source: bounded and expiring, so a process writing records
# for thousands of tenants keeps only the recent ones (a dropped baseline is read again).
BASELINES_KEPT = 4096
_baselines: TTLCache[tuple[str, Pair], tuple[float, Counts]] = TTLCache(
    maxsize=BASELINES_KEPT, ttl=BASELINE_KEPT_S, timer=time.monotonic
)
_lock = threading.Lock()


def export(schema: str, healths: Iterable[SourceHealth]) -> None:
    for health in healths:
        summary = health.window.summary()
        metrics.set_source_health(
            schema,
            health.route,
            health.source,
            alert=health.alert,
            requests=summary["requests"],
            rates={
                outcome: summary[f"{outcome}_rate"]
                for outcome in ("ok", "empty", "failed", "timeout")
            },
        )


def refresh(pairs: Collection[Pair]) -> None:
    """The gauges of ``pairs`` (in the connection's schema) brought up to date; never raises:
    a record's write does not fail for its metrics."""
    if not pairs:
        return
    schema = connection.schema_name
    try:
        now = time.monotonic()
        with _lock:
            known = {
                pair: counts
                for pair in pairs
                if (kept := _baselines.get((schema, pair)))
                and (counts := kept[1]) is not None
                and kept[0] > now
            }
        missing = [pair for pair in pairs if pair not in known]
        if missing:
            fresh = baseline_counts(missing)
            with _lock:
                for pair in missing:
                    known[pair] = fresh.get(pair, Counts())
                    _baselines[(schema, pair)] = (now + BASELINE_KEPT_S, known[pair])
        export(schema, source_health(pairs=pairs, baseline=known))
    except Exception:
        logger.warning("source health metrics of tenant %s not updated", schema, exc_info=True)
