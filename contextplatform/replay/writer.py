"""Replay records are written off the resolve path, and on local disk before the answer.

A resolve appends its record to this process's write-ahead spool (``replay.spool``: one line on
local disk, no database round trip) and hands it to this process's writer; a daemon thread inserts
the records in batches, each in its tenant's schema, and then lets the spool forget them. Readers
in this process (the replay API, the admin pages, completing a turn) call
``flush_current_tenant()`` first, so they never miss a record this process has accepted for their
tenant (and never wait for another tenant's); a record accepted by another worker process lands
within milliseconds, and ``complete_turn`` waits for it briefly. Nothing is dropped: when the queue
is full the resolve writes its own record, a failed batch is retried record by record, the queue is
drained when the server shuts down (the ASGI lifespan's shutdown, ``contextplatform.asgi``) and
when the process exits normally, and what a killed process had accepted but not written is in its
spool, which the next process to start (or any live one, now and then) replays.

``REPLAY_WRITES = "inline"`` (a setting) writes each record in the resolve itself (no spool).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from functools import partial

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django_tenants.utils import schema_context

from contextplatform.core import metrics
from contextplatform.core.batches import take_batch
from contextplatform.core.bulk_copy import copy_instances
from contextplatform.deployments.services import CalibrationStep, calibrate_deployments
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.source_health import gauges as health_gauges
from contextplatform.replay.source_health.aggregate import record_outcomes
from contextplatform.replay.spool import ReplaySpool, Segment, recover_dead_spools

logger = logging.getLogger("contextplatform.replay")

# Work to run once a record is written (in the writer's thread, in the record's tenant schema).
AfterWrite = Callable[[], None]
# The tenant's schema, the record, its follow-up, and the spool entries it clears once written.
Entry = tuple[str, ReplayRecord, AfterWrite | None, list[Segment]]

BATCH_SIZE = 64
# After the first record of a batch, the writer waits this long for more: under load a batch
# then carries several records (one COPY, one calibration UPDATE per deployment) instead of one,
# and an idle process writes a lone record this much later (readers in this process flush; other
# processes wait for a record up to turns.REPLAY_ARRIVAL_S).
BATCH_LINGER_S = 0.02
QUEUE_SIZE = 10_000
RETRY_PAUSE_S = 0.2
# How often a process looks for the spools of processes that ended without writing them: it looks
# at start (a killed worker's successor replays it then), and again for a spool whose replay
# found the database down.
RECOVERY_EVERY_S = 60.0


class PendingReplay:
    """A record built by the resolve but written when its call is over (the gateway's): the
    answer, the provider's usage and the served tool calls go into the one INSERT, and nobody
    waits for the writer to complete a turn. ``submit`` hands it to the writer once. It is spooled
    as the resolve left it, at once: a process killed before the call is over (or between a
    stream's last bytes and its end) still leaves the call's record, as far as it went."""

    def __init__(self, schema: str, record: ReplayRecord) -> None:
        self.schema = schema
        self.record = record
        self.submitted = False
        self.spooled = REPLAY_WRITER.spool_ahead(schema, record)

    def submit(self, after: AfterWrite | None = None) -> None:
        if not self.submitted:
            self.submitted = True
            REPLAY_WRITER.submit(self.schema, self.record, after, spooled=self.spooled)


def writes_inline() -> bool:
    return getattr(settings, "REPLAY_WRITES", "background") == "inline"


class ReplayWriter:
    def __init__(self, spool: ReplaySpool | None = None) -> None:
        self._queue: queue.Queue[Entry] = queue.Queue(maxsize=QUEUE_SIZE)
        self._unfinished: Counter[str] = Counter()  # per schema
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.spool = spool or ReplaySpool()
        self._recovering_in: int | None = None  # the process whose recovery thread runs

    def submit(
        self,
        schema: str,
        record: ReplayRecord,
        after: AfterWrite | None = None,
        *,
        spooled: Segment | None = None,
    ) -> None:
        """Accept ``record`` for ``schema``; it is spooled and written in the background unless
        writes are inline or the queue is full, in which case it is written now. ``after`` runs
        once it is written, in the tenant's schema (work that need not delay the caller, such as
        moving a deployment's calibration). ``spooled``: where an earlier state of the record was
        spooled (``spool_ahead``), cleared with it."""
        if writes_inline():
            write_now(schema, record, after)
            self._unspool([spooled] if spooled is not None else [])
            return
        self._ensure_thread()
        segments = [spooled] if spooled is not None else []
        if (segment := self.spool_ahead(schema, record)) is not None:
            segments.append(segment)
        with self._idle:
            self._unfinished[schema] += 1
        try:
            self._queue.put_nowait((schema, record, after, segments))
        except queue.Full:
            self._done(schema, 1)
            write_now(schema, record, after)
            self._unspool(segments)

    def spool_ahead(self, schema: str, record: ReplayRecord) -> Segment | None:
        """``record`` as it is now, onto this process's spool (nothing when writes are inline).
        A spool that cannot be written (a full or read-only disk) is logged and the record goes
        on to the writer as before: the call is answered, its record only as safe as memory."""
        if writes_inline():
            return None
        self.start_recovery()
        try:
            return self.spool.append(schema, record)
        except OSError:
            logger.exception("replay record %s could not be spooled", record.id)
            return None

    def _unspool(self, written: Iterable[Segment]) -> None:
        try:
            self.spool.done(written)
        except OSError:  # the records are written; their spool is replayed (and skipped) later
            logger.exception("the replay spool could not be cleared")

    def start_recovery(self) -> None:
        """Replay the spools of ended processes now, in a thread, and every
        ``RECOVERY_EVERY_S`` after (once per process)."""
        if self._recovering_in == os.getpid():
            return
        with self._start_lock:
            if self._recovering_in == os.getpid():
                return
            self._recovering_in = os.getpid()
            threading.Thread(target=self._recover, name="replay-recovery", daemon=True).start()

    def _recover(self) -> None:
        while True:
            try:
                recover_dead_spools(self.spool.directory)
            except Exception:
                logger.exception("replaying the spools of ended processes failed")
            finally:
                connection.close()
            time.sleep(RECOVERY_EVERY_S)

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

    def close(self, timeout_s: float = 10.0) -> bool:
        """At the process's end: write what was accepted, then remove the spool's written
        segments (left to a replay when the writer could not finish)."""
        drained = self.flush(timeout_s=timeout_s)
        try:
            self.spool.close()
        except OSError:
            logger.exception("the replay spool could not be closed")
        return drained

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
                        failed = write_records(schema, [record for record, _, _ in entries])
                        # A record not written stays spooled: replayed once this process is gone.
                        self._unspool(
                            segment
                            for record, _, segments in entries
                            if record.id not in failed
                            for segment in segments
                        )
                        run_after(schema, [after for _, after, _ in entries if after is not None])
                    finally:
                        self._done(schema, len(entries))  # its readers need not wait for others
            finally:
                if self._queue.empty():
                    connection.close()  # idle: back to the pool (or closed), not held open


def write_now(schema: str, record: ReplayRecord, after: AfterWrite | None = None) -> None:
    with schema_context(schema):
        with transaction.atomic():
            record.save(force_insert=True)
            touched = record_outcomes([record])
        health_gauges.refresh(touched)
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


Written = tuple[ReplayRecord, AfterWrite | None, list[Segment]]


def by_schema(batch: list[Entry]) -> dict[str, list[Written]]:
    grouped: dict[str, list[Written]] = defaultdict(list)
    for schema, record, after, segments in batch:
        grouped[schema].append((record, after, segments))
    return grouped


def write_records(schema: str, records: list[ReplayRecord]) -> set[str]:
    """The ids of the records that could not be written."""
    close_old_connections()
    try:
        with schema_context(schema):
            # The sources' health counts move with the records, or not at all.
            with transaction.atomic():
                copy_instances(ReplayRecord, records)
                touched = record_outcomes(records)
            health_gauges.refresh(touched)
    except Exception:
        logger.warning("replay batch failed; writing its records one by one", exc_info=True)
        connection.close()  # a broken connection is replaced on next use
        time.sleep(RETRY_PAUSE_S)
        return {record.id for record in records if not write_one(schema, record)}
    return set()


def write_one(schema: str, record: ReplayRecord) -> bool:
    try:
        write_now(schema, record)
        return True
    except Exception:
        metrics.REPLAY_WRITE_FAILURES.inc()
        logger.error(
            "replay record %s of tenant %s could not be written",
            record.id,
            schema,
            exc_info=True,
        )
        connection.close()
        return False


REPLAY_WRITER = ReplayWriter()
atexit.register(REPLAY_WRITER.close)


def flush_current_tenant() -> bool:
    """Before a read of replay records: write what this process accepted for the tenant whose
    schema the connection is in (other tenants' pending records are not waited for)."""
    return REPLAY_WRITER.flush(connection.schema_name)
