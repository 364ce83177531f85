"""Ingestion throughput of the cluster shape's ingestion queue, on 1 and on 2 workers.

For each worker count: a cluster (``scripts.cluster``: PostgreSQL behind PgBouncer, Redis, one web
worker, N Celery workers on ``celery.ingestion`` and one on the default queue), one collection,
``--documents`` documents of WORDS words (one chunk each) posted in jobs of JOB_SIZE (so that N
workers have jobs to share; of a burst of jobs the last calibrates the collection), then the
wall time from the first post to the last job done and the CPU time every process of the cluster
spent meanwhile (the workers, PostgreSQL, PgBouncer, web). onnxruntime spreads one embedding call
over every core, so a worker is not one core: throughput per core is chunks per CPU-second.

    python -m scripts.bench_ingestion [--documents 10000] [--workers 1 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from contextplatform import queues
from scripts.cluster import Cluster

JOB_SIZE = 250
WORDS = 60  # one chunk a document (chunks of 200 words): a support article's paragraph
COLLECTION = "bench-ingestion"
VOCABULARY = [
    "refund",
    "warranty",
    "headphones",
    "battery",
    "charger",
    "shipping",
    "order",
    "invoice",
    "account",
    "password",
    "screen",
    "firmware",
    "update",
    "bluetooth",
    "pairing",
    "volume",
    "noise",
    "cancelling",
    "cable",
    "adapter",
    "return",
    "exchange",
    "damaged",
    "replacement",
    "support",
    "ticket",
    "delivery",
    "address",
    "tracking",
    "subscription",
    "plan",
    "billing",
    "receipt",
    "discount",
    "coupon",
    "store",
    "pickup",
    "manual",
    "setting",
    "reset",
    "factory",
    "speaker",
]


def document(index: int) -> dict[str, str]:
    rng = random.Random(index)
    text = " ".join(rng.choice(VOCABULARY) for _ in range(WORDS))
    return {"id": f"doc-{index:05d}", "title": f"Document {index}", "text": f"{text}."}


def cpu_seconds(cluster: Cluster) -> float:
    """CPU time so far of every process of the cluster (each part's whole tree)."""
    total = 0.0
    for part in cluster.parts.values():
        try:
            root = psutil.Process(part.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def run(workers: int, documents: int) -> dict[str, Any]:
    kinds = ((queues.INGESTION,),) * workers + ((queues.DEFAULT,),)
    with tempfile.TemporaryDirectory(prefix="bench-ingestion-") as root:
        Path(root).chmod(0o755)  # PostgreSQL's own user reads its data folder under it
        cluster = Cluster(root=Path(root), web_workers=1, worker_kinds=kinds)
        with cluster:
            headers = {"Authorization": f"Bearer {cluster.api_key}"}
            with httpx.Client(base_url=cluster.base_url, headers=headers, timeout=120) as api:
                created = api.post("/api/v1/collections", json={"name": COLLECTION})
                assert created.status_code == 201, created.text
                cpu_before, started = cpu_seconds(cluster), time.monotonic()
                jobs = []
                for first in range(0, documents, JOB_SIZE):
                    batch = [document(i) for i in range(first, min(first + JOB_SIZE, documents))]
                    posted = api.post(
                        f"/api/v1/collections/{COLLECTION}/documents", json={"documents": batch}
                    )
                    assert posted.status_code == 202, posted.text
                    jobs.append(posted.json()["job"])
                for job in jobs:
                    while (status := api.get(f"/api/v1/jobs/{job}").json()["status"]) not in (
                        "done",
                        "failed",
                    ):
                        time.sleep(0.5)
                    assert status == "done", job
                wall = time.monotonic() - started
                cpu = cpu_seconds(cluster) - cpu_before
                listed = api.get("/api/v1/collections").json()["data"]
                chunks = next(c["chunks"] for c in listed if c["name"] == COLLECTION)
    return {
        "workers": workers,
        "documents": documents,
        "chunks": chunks,
        "wall_s": round(wall, 1),
        "chunks_per_s": round(chunks / wall, 1),
        "cpu_s": round(cpu, 1),
        "chunks_per_cpu_s": round(chunks / cpu, 1),
        "cores": psutil.cpu_count(),
        "load_average_1m": round(psutil.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path)
    options = parser.parse_args(argv)
    results = []
    for workers in options.workers:
        result = run(workers, options.documents)
        print(json.dumps(result), flush=True)
        results.append(result)
    if options.out:
        options.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
