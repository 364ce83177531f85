"""Re-run and diff: a recorded request resolved again (``use_cases.rerun``: history and memories
as they stood then, nothing written, no answer asked of the model) beside what its replay record
kept, and what changed item by item (``replay.rerun_diff``). For one record (the API's
``POST /replay/{id}/rerun``, the replay record's Re-run page) and for a route's latest captured
records against a draft (the route page's "try this draft").

A rerun calls the route's sources and judges for real: a judge's cost is in the rerun's side
(``judge_usage``). The trial over a route's latest records runs them one after the other in the
request (at most ``MAX_TRIAL``), which is fine for an operator's check but not a batch job."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextplatform.core.errors import ApiError
from contextplatform.replay import rerun_diff
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import flush_current_tenant
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import rerun
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import route_by_name

if TYPE_CHECKING:
    from tenants.models import Tenant

MAX_TRIAL = 500
DEFAULT_TRIAL = 50
FAILED = frozenset({"failed", "timeout"})


def recorded_side(record: ReplayRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "created_at": record.created_at.isoformat(),
        **rerun_diff.side(
            status=record.status,
            sources=record.sources or [],
            items=record.items or [],
            tokens=record.tokens or {},
        ),
    }


def rerun_side(resolution: Resolution) -> dict[str, Any]:
    return rerun_diff.side(
        status=resolution.status,
        sources=resolution.source_reports(),
        items=resolution.item_reports(),
        tokens=resolution.token_counts(),
    )


def rerun_and_diff(
    *, tenant: Tenant, record: ReplayRecord, spec: RouteSpec | None = None
) -> dict[str, Any]:
    """``{"recorded", "rerun", "diff"}`` for one record, against the route as it is now or
    ``spec`` (a draft). 409 when the record kept no request, or its route is gone."""
    if spec is None and record.request_body is not None and route_by_name(record.route) is None:
        raise ApiError(
            "conflict",
            f"route {record.route!r} of resolve {record.id!r} no longer exists",
            status=409,
        )
    resolution = rerun(tenant=tenant, record=record, spec=spec)
    recorded, again = recorded_side(record), rerun_side(resolution)
    return {"recorded": recorded, "rerun": again, "diff": rerun_diff.diff(recorded, again)}


@dataclass
class Trial:
    """A draft tried on a route's latest captured records."""

    records: int = 0
    tokens_recorded: int = 0
    tokens_rerun: int = 0
    items_changed: int = 0
    unchanged: int = 0
    # Per source: in how many reruns it failed (status failed or timeout).
    failing: Counter[str] = field(default_factory=Counter)
    judge_usage: dict[str, Any] | None = None
    # Records the draft could not run (e.g. a request larger than the draft's budget): id → why.
    errors: dict[str, str] = field(default_factory=dict)
    # One line per record run: its id, token counts and what changed.
    lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens_saved(self) -> int:
        return self.tokens_recorded - self.tokens_rerun


def latest_captured(route: str, limit: int) -> list[ReplayRecord]:
    flush_current_tenant()
    return list(
        ReplayRecord.objects.filter(route=route, request_body__isnull=False).order_by(
            "-created_at", "-id"
        )[:limit]
    )


def try_draft(*, tenant: Tenant, route: str, spec: RouteSpec, limit: int) -> Trial:
    """Rerun the route's latest ``limit`` captured records against ``spec`` and add up what it
    would change: tokens saved, items changed, the sources that would fail, the judge's cost."""
    if not 1 <= limit <= MAX_TRIAL:
        raise ApiError("invalid_request", f"limit: must be between 1 and {MAX_TRIAL}")
    trial = Trial()
    usages = []
    for record in latest_captured(route, limit):
        try:
            result = rerun_and_diff(tenant=tenant, record=record, spec=spec)
        except ApiError as error:
            trial.errors[record.id] = error.message
            continue
        changes, again = result["diff"], result["rerun"]
        trial.records += 1
        trial.tokens_recorded += int(changes["tokens"]["recorded"] or 0)
        trial.tokens_rerun += int(changes["tokens"]["rerun"] or 0)
        changed = rerun_diff.items_changed(changes)
        trial.items_changed += changed
        trial.unchanged += rerun_diff.is_empty(changes)
        trial.failing.update(s["name"] for s in again["sources"] if s["status"] in FAILED)
        if again["judge_usage"] is not None:
            usages.append(again["judge_usage"])
        trial.lines.append(
            {
                "id": record.id,
                "created_at": record.created_at,
                "tokens": changes["tokens"],
                "added": len(changes["added"]),
                "dropped": len(changes["dropped"]),
                "moved": len(changes["moved"]),
                "failing": [s["name"] for s in again["sources"] if s["status"] in FAILED],
            }
        )
    trial.judge_usage = rerun_diff.total_usage(usages) if usages else None
    return trial
