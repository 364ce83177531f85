"""Ingestion through a real Celery worker and Redis: the task runs in the tenant's schema."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import TENANT_KEYS
from tests.live import celery_worker, live_server


@pytest.fixture(scope="module")
def worker_stack(django_db_setup: Any, redis_url: str) -> Iterator[str]:
    queue = f"test-{uuid.uuid4().hex[:8]}"  # this run's own queue on the shared Redis
    env = {
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_TASK_DEFAULT_QUEUE": queue,
    }
    with celery_worker({**env}) as worker, live_server(env) as base:
        yield base
        assert worker.poll() is None, "the worker died"


def wait_for_job(client: httpx.Client, job: str, headers: dict[str, str]) -> dict[str, Any]:
    for _ in range(600):
        body = client.get(f"/api/v1/jobs/{job}", headers=headers).json()
        if body["status"] in {"done", "failed"}:
            return body
        time.sleep(0.05)
    pytest.fail(f"job {job} never finished: {body}")


def test_a_real_worker_ingests_into_the_right_tenant(worker_stack: str) -> None:
    collection = f"kb{uuid.uuid4().hex[:6]}"
    acme = {"Authorization": f"Bearer {TENANT_KEYS['acme']}"}
    globex = {"Authorization": f"Bearer {TENANT_KEYS['globex']}"}
    with httpx.Client(base_url=worker_stack, timeout=30) as client:
        for headers in (acme, globex):
            assert (
                client.post(
                    "/api/v1/collections", json={"name": collection}, headers=headers
                ).status_code
                == 201
            )
        documents = [
            {"id": "w", "title": "Warranty", "text": "Headphones have a two-year warranty."}
        ]
        accepted = client.post(
            f"/api/v1/collections/{collection}/documents",
            json={"documents": documents},
            headers=acme,
        )
        assert accepted.status_code == 202
        assert accepted.json()["status"] == "queued"  # sent to the worker, not run inline
        job = wait_for_job(client, accepted.json()["job"], acme)
        assert job["status"] == "done", job
        assert job["chunks_written"] == 1
        acme_docs = client.get(f"/api/v1/collections/{collection}/documents", headers=acme).json()[
            "data"
        ]
        globex_docs = client.get(
            f"/api/v1/collections/{collection}/documents", headers=globex
        ).json()["data"]
        assert [(d["id"], d["status"]) for d in acme_docs] == [("w", "indexed")]
        assert globex_docs == []
        assert (
            client.get(f"/api/v1/jobs/{accepted.json()['job']}", headers=globex).status_code == 404
        )
