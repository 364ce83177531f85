"""Replay records are written off the resolve path.

A resolve hands its record to this process's writer and returns; a daemon thread inserts the
records in batches, each in its tenant's schema. Readers in this process (the replay API, the
admin pages, completing a turn) call ``flush_current_tenant()`` first, so they never miss a
record this process has accepted for their tenant (and never wait for another tenant's); a
record accepted by another worker process lands within milliseconds, and ``complete_turn`` waits
for it briefly. Nothing is dropped: when the queue is full the resolve
writes its own record, a failed batch is retried record by record, and the queue is drained when
the server shuts down (the ASGI lifespan's shutdown, ``contextplatform.asgi``) and when the process
exits normally. Only a killed process can lose the records it had not yet written.

``REPLAY_WRITES = "inline"`` (a setting) writes each record in the resolve itself.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial

from django.conf import settings
from django.db import close_old_connections, connection
from django_tenants.utils import schema_context

from contextplatform.core import metrics
from contextplatform.core.batches import take_batch
from contextplatform.core.bulk_copy import copy_instances
from contextplatform.deployments.services import CalibrationStep, calibrate_deployments
from contextplatform.routing.models import ReplayRecord

logger = logging.getLogger("contextplatform.replay")

# Work to run once a record is written (in the writer's thread, in the record's tenant schema).
AfterWrite = Callable[[], None]
Entry = tuple[str, ReplayRecord, AfterWrite | None]

BATCH_SIZE = 64
# After the first record of a batch, the writer waits this long for more: under load a batch
# then carries several records (one COPY, one calibration UPDATE per deployment) instead of one,
# and an idle process writes a lone record this much later (readers in this process flush; other
# processes wait for a record up to turns.REPLAY_ARRIVAL_S).
BATCH_LINGER_S = 0.02
QUEUE_SIZE = 10_000
RETRY_PAUSE_S = 0.2


class PendingReplay:
    """A record built by the resolve but written when its call is over (the gateway's): the
    answer, the provider's usage and the served tool calls go into the one INSERT, and nobody
    waits for the writer to complete a turn. ``submit`` hands it to the writer once."""

    def __init__(self, schema: str, record: ReplayRecord) -> None:
        self.schema = schema
        self.record = record
        self.submitted = False

    def submit(self, after: AfterWrite | None = None) -> None:
        if not self.submitted:
            self.submitted = True
            REPLAY_WRITER.submit(self.schema, self.record, after)


def writes_inline() -> bool:
    return getattr(settings, "REPLAY_WRITES", "background") == "inline"


class ReplayWriter:
    def __init__(self) -> None:
        self._queue: queue.Queue[Entry] = queue.Queue(maxsize=QUEUE_SIZE)
        self._unfinished: Counter[str] = Counter()  # per schema
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, schema: str, record: ReplayRecord, after: AfterWrite | None = None) -> None:
        """Accept ``record`` for ``schema``; it is written in the background unless writes are
        inline or the queue is full, in which case it is written now. ``after`` runs once it is
        written, in the tenant's schema (work that need not delay the caller, such as moving a
        deployment's calibration)."""
        if writes_inline():
            write_now(schema, record, after)
            return
        self._ensure_thread()
        with self._idle:
            self._unfinished[schema] += 1
        try:
            self._queue.put_nowait((schema, record, after))
        except queue.Full:
            self._done(schema, 1)
            write_now(schema, record, after)

    def flush(self, schema: str | None = None, timeout_s: float = 10.0) -> bool:
        """Wait until every record accepted so far for ``schema`` (every tenant's, without one)
        is written or failed and logged."""
        deadline = time.monotonic() + timeout_s

        def pending() -> int:
            return self._unfinished[schema] if schema else self._unfinished.total()

        with self._idle:
            while pending():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="replay-writer", daemon=True)
                self._thread.start()

    def _done(self, schema: str, count: int) -> None:
        with self._idle:
            self._unfinished[schema] -= count
            if self._unfinished[schema] <= 0:
                del self._unfinished[schema]
            self._idle.notify_all()

    def _run(self) -> None:
        while True:
            batch = take_batch(self._queue, BATCH_SIZE, BATCH_LINGER_S)
            try:
                for schema, entries in by_schema(batch).items():
                    try:
                        write_records(schema, [record for record, _ in entries])
                        run_after(schema, [after for _, after in entries if after is not None])
                    finally:
                        self._done(schema, len(entries))  # its readers need not wait for others
            finally:
                if self._queue.empty():
                    connection.close()  # idle: back to the pool (or closed), not held open


def write_now(schema: str, record: ReplayRecord, after: AfterWrite | None = None) -> None:
    with schema_context(schema):
        record.save(force_insert=True)
    if after is not None:
        run_after(schema, [after])


def run_after(schema: str, afters: list[AfterWrite]) -> None:
    """Each record's follow-up work, once it is written; a failure is logged, never raised. The
    batch's calibration steps move each deployment once (one UPDATE, not one per answer)."""
    if not afters:
        return
    steps = [after for after in afters if isinstance(after, CalibrationStep)]
    others = [after for after in afters if not isinstance(after, CalibrationStep)]
    with schema_context(schema):
        for work in ([partial(calibrate_deployments, steps)] if steps else []) + others:
            try:
                work()
            except Exception:
                logger.exception("work after writing a replay record of tenant %s failed", schema)


def by_schema(
    batch: list[Entry],
) -> dict[str, list[tuple[ReplayRecord, AfterWrite | None]]]:
    grouped: dict[str, list[tuple[ReplayRecord, AfterWrite | None]]] = defaultdict(list)
    for schema, record, after in batch:
        grouped[schema].append((record, after))
    return grouped


def write_records(schema: str, records: list[ReplayRecord]) -> None:
    close_old_connections()
    try:
        with schema_context(schema):
            copy_instances(ReplayRecord, records)
    except Exception:
        logger.warning("replay batch failed; writing its records one by one", exc_info=True)
        connection.close()  # a broken connection is replaced on next use
        time.sleep(RETRY_PAUSE_S)
        for record in records:
            write_one(schema, record)


def write_one(schema: str, record: ReplayRecord) -> None:
    try:
        write_now(schema, record)
    except Exception:
        metrics.REPLAY_WRITE_FAILURES.inc()
        logger.error(
            "replay record %s of tenant %s could not be written",
            record.id,
            schema,
            exc_info=True,
        )
        connection.close()


REPLAY_WRITER = ReplayWriter()
atexit.register(REPLAY_WRITER.flush)


def flush_current_tenant() -> bool:
    """Before a read of replay records: write what this process accepted for the tenant whose
    schema the connection is in (other tenants' pending records are not waited for)."""
    return REPLAY_WRITER.flush(connection.schema_name)
