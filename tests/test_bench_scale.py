"""The scale bench section (scripts/bench_scale.py): its arithmetic and its page, pure."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.bench_scale import (
    END,
    START,
    ScaleResults,
    migrate_per_tenant,
    scale_checks,
    scale_env_database,
    scale_section,
)


def step(tenants: int, migrate: float | None, errors: int = 0) -> dict[str, Any]:
    return {
        "tenants": tenants,
        "load_average": "1.00 / 1.00 / 1.00",
        "normal_create_s": [2.0],
        "clone_create_s": [0.5] if tenants > 1 else [],
        "populate_s": [1.0],
        "pg_class_rows": 700 + 220 * tenants,
        "pg_catalog_bytes": 10 * 2**20,
        "database_bytes": 20 * 2**20,
        "resolve_ms": [10.0, 20.0],
        "gateway_ms": [12.0, 22.0],
        "first_touch_ms": [30.0],
        "http_errors": {"/api/v1/resolve 500": errors} if errors else {},
        "rss_start_mb": 300.0,
        "rss_touched_mb": 310.0,
        "rss_after_mb": 312.0,
        "server_connections_max": 11,
        "sessions_per_request": 0.01,
        "statements_per_request": 12.0,
        "set_search_path_per_request": 1.0,
        "migrate_s": {}
        if migrate is None
        else {
            "no-op, serial": migrate,
            "no-op, parallel": migrate,
            "one migration, serial": migrate,
            "one migration, parallel": migrate,
        },
        "sweep_s": {"memory.resend_stranded_turns (every 60 s)": 0.01 * tenants},
    }


def results(*steps: dict[str, Any]) -> ScaleResults:
    run = {"steps": list(steps), "normal_per_step": 3, "requests": 2, "processes": 2}
    run["cloned_tenant_checked"] = True
    run["django_tenants_clone_error"] = "column does not have dimensions"
    return ScaleResults(date="today", quick=True, run=run)


def test_the_migration_per_tenant_is_the_slope_without_the_start_up() -> None:
    measured = results(step(1, 20.0), step(11, 30.0), step(51, 70.0), step(200, None))
    assert migrate_per_tenant(measured, "no-op, serial") == pytest.approx(1.0)


def test_an_error_over_http_fails_its_check() -> None:
    assert all(check.passed for check in scale_checks(results(step(1, 1.0), step(10, 2.0))))
    failed = scale_checks(results(step(1, 1.0), step(10, 2.0, errors=3)))[0]
    assert not failed.passed and "3 errors" in failed.measured


def test_the_section_sits_between_its_markers_and_says_what_was_not_measured() -> None:
    text = scale_section(results(step(1, 1.0), step(100, None)), "abc1234")
    assert text.startswith(START) and text.endswith(END)
    assert "commit abc1234" in text and "## 17. Thousands of tenants" in text
    assert "not measured" in text


def test_the_bench_never_runs_against_the_development_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://dev@localhost/contextplatform")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("BENCH_SCALE_DATABASE_URL", raising=False)
    env = scale_env_database()
    assert "DATABASE_URL" not in env and env["REDIS_URL"] == ""
    assert env["PGSERVER_DATADIR"].endswith("var/bench/scale/pgdata")
