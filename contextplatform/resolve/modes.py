"""What each way of running the resolve pipeline may do: a mode is data, read where a stage runs
or a side effect happens (``pipeline.py``), never an if-chain per caller.

The pipeline's stages are plan → fetch → pack → inject → compress → record. A mode names the
stages it runs and what it may touch:

| mode                | stages                               | replay | session | memory write | memory strength | recovery blobs | caches | metrics | live events | calibration |
|---------------------|--------------------------------------|--------|---------|--------------|-----------------|----------------|--------|---------|-------------|-------------|
| live                | plan fetch pack inject compress record | yes  | yes     | yes          | yes             | yes            | yes    | yes     | yes         | yes         |
| preview             | plan fetch pack inject compress      | -      | -       | -            | -               | -              | yes    | yes     | -           | -           |
| match_preview       | fetch (previewable sources)          | -      | -       | -            | -               | -              | -      | yes     | -           | -           |
| compression_preview | plan compress                        | -      | -       | -            | -               | -              | -      | -       | -           | -           |
| prewarm             | fetch (prewarmable, read ahead)      | -      | -       | -            | -               | -              | yes    | -       | -           | -           |
| search              | fetch (the one lazy source)          | -      | -       | -            | -               | -              | yes    | yes     | -           | -           |
| rerun               | plan fetch pack inject compress      | -      | -       | -            | -               | -              | -      | -       | -           | -           |
| evaluate            | plan fetch pack inject compress      | -      | -       | -            | -               | -              | -      | -       | -           | -           |
| count               | plan fetch pack inject compress      | -      | -       | -            | -               | -              | -      | -       | -           | -           |

Columns (the ``Touch`` names): ``replay_record`` (the resolve's ReplayRecord), ``session`` (the user's message stored
at resolve, the answer at hand-back), ``memory_write`` (a kind's after-resolve hook queues the
turn's memory write), ``memory_strength`` (a recalled memory is reinforced), ``recovery_blobs``
(compression's recoverable originals stored in the database; otherwise kept in memory only),
``caches`` (the RAG result cache and the session's pre-warm cache, read and written; prewarm
writes the latter), ``metrics`` (per-source and per-stage metrics, compression outcome
counters), ``live_events`` (the route's live stream), ``calibration`` (the deployment's token
calibration, moved by the provider's usage at hand-back).

Only ``live`` chooses the arm of a route's traffic split (``arms.py``); the others run the arm
their caller names (a rerun: the record's), else the route's own context.

``rerun`` runs a recorded request against the current or a draft route configuration and reads
history and memories as they stood at the record's time (``ContextRequest.as_of``).
``evaluate`` resolves a route's evaluation case (``contextplatform/evals``) as the route stands:
like a rerun it writes nothing, and it reads no cache, so a run measures the sources themselves.
``count`` resolves a request as the gateway would send it, to count its tokens
(``POST /v1/messages/count_tokens``): it writes nothing, and asks no deployment to judge (a judge
block scores with the local judge, as ``calls_judge`` says), so a count costs no model call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Stage = Literal["plan", "fetch", "pack", "inject", "compress", "record"]
Touch = Literal[
    "replay_record",
    "session",
    "memory_write",
    "memory_strength",
    "recovery_blobs",
    "caches",
    "metrics",
    "live_events",
    "calibration",
]
# Which of the route's sources the fetch stage reads: all of them, those the RAG preview shows,
# those read ahead when a session opens, or the one source the caller names (a lazy search).
SourceChoice = Literal["route", "previewable", "prewarmable", "given"]

ALL_STAGES: frozenset[Stage] = frozenset(get_args(Stage))
ALL_TOUCHES: frozenset[Touch] = frozenset(get_args(Touch))


@dataclass(frozen=True)
class Mode:
    name: str
    stages: frozenset[Stage]
    touches: frozenset[Touch]
    sources: SourceChoice = "route"
    # The fetch reads ahead (``ContextSource.prewarm``) instead of fetching for the turn.
    reads_ahead: bool = False
    # A request larger than the budget: refused (400) by the plan, or reported by the
    # compression stage (the compression preview answers it as a skip).
    overflow: Literal["refuse", "report"] = "refuse"
    # The request's arm of the route's traffic split is chosen here (by a stable hash of the
    # caller); any other mode runs the arm its caller names (a rerun: the record's), else main.
    splits_traffic: bool = False
    # A judge block (a source's, compression's) asks its deployment; False: the local judge scores
    # instead, so the run makes no model call (a token count).
    calls_judge: bool = True

    def runs(self, stage: Stage) -> bool:
        return stage in self.stages

    def may(self, touch: Touch) -> bool:
        return touch in self.touches


def stages(*names: Stage) -> frozenset[Stage]:
    return frozenset(names)


def touches(*names: Touch) -> frozenset[Touch]:
    return frozenset(names)


RESOLVING = stages("plan", "fetch", "pack", "inject", "compress")

LIVE = Mode("live", ALL_STAGES, ALL_TOUCHES, splits_traffic=True)
PREVIEW = Mode("preview", RESOLVING, touches("caches", "metrics"))
MATCH_PREVIEW = Mode("match_preview", stages("fetch"), touches("metrics"), sources="previewable")
COMPRESSION_PREVIEW = Mode(
    "compression_preview", stages("plan", "compress"), touches(), overflow="report"
)
PREWARM = Mode(
    "prewarm", stages("fetch"), touches("caches"), sources="prewarmable", reads_ahead=True
)
SEARCH = Mode("search", stages("fetch"), touches("caches", "metrics"), sources="given")
RERUN = Mode("rerun", RESOLVING, touches())
EVALUATE = Mode("evaluate", RESOLVING, touches())
COUNT = Mode("count", RESOLVING, touches(), calls_judge=False)

MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        LIVE,
        PREVIEW,
        MATCH_PREVIEW,
        COMPRESSION_PREVIEW,
        PREWARM,
        SEARCH,
        RERUN,
        EVALUATE,
        COUNT,
    )
}
