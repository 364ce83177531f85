"""Every task goes to a queue some worker consumes (contextplatform/queues.py): in the cluster
shape (scripts/cluster.py) and in deploy/ (Procfile, Compose). A task routed to a queue no worker
takes would wait in Redis for ever."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from contextplatform import queues
from contextplatform.celery import app
from scripts.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]


def registered_tasks() -> set[str]:
    app.loader.import_default_modules()  # the apps' tasks modules (autodiscover)
    return {name for name in app.tasks if not name.startswith("celery.")}


def routed_queue(task: str) -> str:
    """The queue Celery's router picks for ``task`` (as ``apply_async`` sends it)."""
    return str(app.amqp.router.route({}, task)["queue"].name)


def consumed_queues(args: list[str]) -> set[str]:
    return set(args[args.index("--queues") + 1].split(",")) if "--queues" in args else set()


def test_every_task_is_routed_to_its_kinds_queue() -> None:
    tasks = registered_tasks()
    assert set(queues.TASK_KINDS) <= tasks  # no route names a task that is gone
    for task in tasks:
        assert routed_queue(task) == queues.queue_of(task), task
    assert routed_queue("memory.write_turn") == "celery.memory"
    assert routed_queue("sources.ingest_documents") == "celery.ingestion"
    assert routed_queue("evals.run_evaluation") == "celery.evaluation"
    assert routed_queue("memory.apply_retention") == "celery"


def test_every_queue_a_task_goes_to_has_a_worker_in_the_cluster_shape() -> None:
    shape = Cluster(root=Path("/nonexistent"))
    consumed = {q for index in range(shape.celery_workers) for q in shape.worker_queues(index)}
    assert {routed_queue(task) for task in registered_tasks()} <= consumed
    # The fault tests kill worker0 mid-write: another writes memories meanwhile.
    assert shape.worker_queues(0) == shape.worker_queues(1) == ["celery.memory"]


def test_every_queue_a_task_goes_to_has_a_worker_in_deploy() -> None:
    routed = {routed_queue(task) for task in registered_tasks()}
    lines = (ROOT / "deploy" / "Procfile").read_text().splitlines()
    procfile = [shlex.split(line.split(":", 1)[1]) for line in lines if " worker " in line]
    assert routed <= set().union(*(consumed_queues(args) for args in procfile))
    services = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]
    composed = [s["command"] for s in services.values() if "worker" in s.get("command", [])]
    assert routed <= set().union(*(consumed_queues(args) for args in composed))


def test_a_worker_without_queues_consumes_every_one() -> None:
    declared = {queue.name for queue in app.conf.task_queues}
    assert declared == set(queues.all_queues())
    assert {routed_queue(task) for task in registered_tasks()} <= declared


def test_a_task_reaches_its_queue_only() -> None:
    """Each queue bound by its own name: a task published for one lands in that one alone (a
    queue declared by name only is bound to the default routing key, shared by all)."""
    declared = app.amqp.queues
    for task in registered_tasks():
        queue = app.amqp.router.route({}, task)["queue"]
        bound_alike = [
            name
            for name, other in declared.items()
            if other.exchange.name == queue.exchange.name and other.routing_key == queue.routing_key
        ]
        assert bound_alike == [queue.name], task


def test_a_default_queue_of_its_own_takes_every_kind_with_it() -> None:
    """Two deployments (or a test run) on one Redis never share a queue."""
    assert queues.queue_of("memory.write_turn", "test-1234") == "test-1234.memory"
    assert queues.queue_of("memory.apply_retention", "test-1234") == "test-1234"
    assert set(queues.all_queues("test-1234")) == {
        "test-1234",
        "test-1234.memory",
        "test-1234.ingestion",
        "test-1234.evaluation",
    }
