"""The "backends" section of docs/benchmarks.md (vector backends beside pgvector) and its plot;
``BENCH_ONLY=backends`` replaces it alone (``report.write_section``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

from scripts import report
from scripts.bench_backends import (
    ENGINES,
    FILTERED_QUERIES,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    MILVUS,
    QDRANT,
    VECTORSTORE,
    BackendsResults,
)
from scripts.bench_stats import summarize

START = "<!-- backends:start -->"
END = "<!-- backends:end -->"
PLOT = "backends_latency.png"
COLOURS = {VECTORSTORE: "tab:blue", MILVUS: "tab:orange", QDRANT: "tab:red"}
LABELS = ("plain", "filtered (10 % of rows)")


def plot(results: BackendsResults, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, label in zip(axes, LABELS, strict=True):
        for backend in (VECTORSTORE, MILVUS, QDRANT):
            run = results.run(backend, label)
            if run is None or not run.latencies_ms:
                continue
            report.ecdf(ax, run.latencies_ms, f"{backend} (recall@10 {run.recall_at_10:.3f})")
            ax.get_lines()[-1].set_color(COLOURS[backend])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: no overlap
        ax.set_xlabel("recall latency, ms (log scale)")
        ax.set_title(f"{results.rows:,} chunks, k = 10, {label}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("fraction of queries")
    report.save_figure(fig, path)


def run_rows(results: BackendsResults) -> list[list[str]]:
    rows = []
    for label in LABELS:
        for backend in (VECTORSTORE, MILVUS, QDRANT):
            run = results.run(backend, label)
            if run is None:
                continue
            latency = summarize(run.latencies_ms)
            rows.append(
                [
                    f"`{backend}`",
                    ENGINES[backend],
                    label,
                    str(run.queries),
                    f"{latency.p50:.2f}",
                    f"{latency.p99:.2f}",
                    f"{run.recall_at_10:.4f}",
                    f"{run.returned:.1f}",
                ]
            )
    return rows


def build_rows(results: BackendsResults) -> list[list[str]]:
    return [
        [
            f"`{build.backend}`",
            "reused (marker matches)" if build.reused else "built this run",
            f"{build.load_s:.1f}" if not build.reused else "-",
            f"{build.ready_s:.1f}",
        ]
        for build in results.builds
    ]


def ratio_text(results: BackendsResults) -> str:
    base = results.run(VECTORSTORE, "plain")
    if base is None:
        return ""
    base_p50 = summarize(base.latencies_ms).p50
    parts = []
    for backend in (MILVUS, QDRANT):
        run = results.run(backend, "plain")
        if run is not None and base_p50:
            parts.append(f"`{backend}` {summarize(run.latencies_ms).p50 / base_p50:.0f} x")
    return ", ".join(parts)


def filter_recall_note(results: BackendsResults) -> str:
    """Why Milvus Lite's filtered recall is lower, when it is."""
    milvus, base = results.run(MILVUS, LABELS[1]), results.run(VECTORSTORE, LABELS[1])
    if milvus is None or base is None or milvus.recall_at_10 >= base.recall_at_10 - 0.01:
        return ""
    return (
        ", a filtered search restricted to the matching rows at that same ef (hence its lower "
        "filtered recall@10; pgvector's iterative scans go on until k rows pass)"
    )


def filtered_queries(results: BackendsResults) -> int:
    run = results.run(VECTORSTORE, LABELS[1])
    return run.queries if run is not None else FILTERED_QUERIES


def section(results: BackendsResults, commit: str) -> str:
    parts = [
        START,
        "## Vector backends: milvus and qdrant beside vectorstore",
        f"Measured {results.date} at commit `{commit}` by `BENCH_ONLY=backends make bench` "
        f"(`scripts/bench_backends.py`); load average {results.load_average}; section runtime "
        f"{results.runtime_s:.0f} s.{report.quick_note(results.quick)}",
        f"The same {results.rows:,} Cranfield-derived chunks as the retrieval section's 100k "
        f"recall (its chunk vectors, replicated with the same seeded noise: {results.noise}) and "
        f"the same {results.queries} query vectors (the Cranfield queries through the platform's "
        "embedder), in the three engines at once: the `vectorstore` collection `bench-scale` "
        "(pgvector HNSW, the retrieval section's), a Milvus Lite file and a Qdrant local-mode "
        "directory of the bench tenant (`VECTOR_LOCAL_ROOT/bench/`). Each call is the backend's "
        "own engine call as a fetch makes it once the query is embedded: "
        "`sources.recall.nearest_chunks`, `MilvusBackend.search`, `QdrantBackend.search` (the "
        "engine's search and the hits mapped with their cosine scores), k = 10. recall@10 is "
        'against an exact scan (numpy, every row). The filtered runs (`{"group": "g3"}`, 10 % '
        f"of the rows, passed down to each engine) take the first {filtered_queries(results)} "
        "queries, the same for all three: both embedded engines filter in Python over every row.",
        report.table(
            [
                "backend",
                "engine",
                "search",
                "queries",
                "p50 ms",
                "p99 ms",
                "recall@10",
                "hits/query",
            ],
            run_rows(results),
        ),
        f"Plain search p50 against `vectorstore`: {ratio_text(results)}.",
        report.table(
            ["backend", "data", "insert / upsert s", "index built and loaded / reopened s"],
            build_rows(results),
        ),
        "How each engine searches. **pgvector**: HNSW (m 16, ef_construction 64) with the "
        "`hnsw.ef_search` and iterative scans `nearest_chunks` sets. **Milvus Lite** 3.2.2: "
        f"faiss HNSW (M {HNSW_M}, efConstruction {HNSW_EF_CONSTRUCTION}), searched with ef "
        f"max(64, k){filter_recall_note(results)}; milvus-lite 3 is Milvus rewritten in Python over faiss, and most of a "
        "search is Python work over every row of the collection (its delete marks, and a filter "
        "expression evaluated row by row), not faiss. **Qdrant local mode**: an exact scan in "
        "numpy (recall 1 by construction) with payload filters in Python; qdrant-client itself "
        "warns that the local mode is not recommended above 20,000 points.",
        "What this says: both embedded engines are development engines, as `docs/configuration.md` "
        "says of them (one platform process each; tests and trying a collection out). A Milvus or "
        "Qdrant *server*, what a deployment would use, is not measured here (none runs on this "
        "machine); its latency would be its own plus a network round trip, and says nothing about "
        "these numbers.",
        f"![Recall latency of the vector backends](bench/{PLOT})",
        END,
    ]
    return "\n\n".join(parts)


write_backends = report.plotted_writer(plot, section, PLOT, START, END)


def print_backends(results: BackendsResults) -> None:
    print()
    print("Vector backends benchmark summary")
    for row in run_rows(results):
        print(
            f"  {row[0]:<14} {row[2]:<24} {row[3]:>4} queries  p50 {row[4]:>8} ms  "
            f"p99 {row[5]:>8} ms  recall@10 {row[6]}"
        )
    for build in results.builds:
        state = "reused" if build.reused else f"loaded in {build.load_s:.0f} s"
        print(f"  {build.backend}: {state}, ready in {build.ready_s:.1f} s")
    print(f"  backends runtime {results.runtime_s:.0f} s")
