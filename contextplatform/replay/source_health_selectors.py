"""Reads of each source's health (the tenant is the connection's schema)."""

from __future__ import annotations

from django.db import connection

from contextplatform.database_routing import lag_tolerant
from contextplatform.replay.source_health.compute import SourceHealth, source_health
from contextplatform.replay.source_health.gauges import export
from contextplatform.replay.writer import flush_current_tenant


def sources_health(route: str | None = None) -> list[SourceHealth]:
    """Every source's health (of one route), by route and source, with this process's accepted
    records written first; ``/metrics`` gets what was read. From the replica when there is one
    (``lag_tolerant``): an hour's counts a moment behind say the same."""
    flush_current_tenant()
    healths = source_health(route=route, using=lag_tolerant())
    export(connection.schema_name, healths)
    return healths
