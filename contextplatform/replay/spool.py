"""The replay writer's write-ahead spool: a record is on local disk before its call is answered.

The background writer keeps accepted records in memory for up to a batch's linger; a process killed
in that moment (SIGKILL, the OOM killer) took them with it. So each record is first appended, one
JSON line, to a segment file of this process (``REPLAY_SPOOL_DIR``), with one ``os.write`` on an
``O_APPEND`` descriptor: no fsync, since a killed *process* leaves the page cache to the kernel,
which writes it out; only a lost host loses what it had not written (docs/deploy.md). Once the
writer has written every record of a segment to PostgreSQL, the segment is emptied (the one being
appended to) or removed (an older one).

Each segment is held under an exclusive ``flock`` for as long as its process lives; the kernel
releases it when the process dies, however it dies. ``recover_dead_spools`` (run by every process
at start and then now and then) replays the segments nobody holds into the database with
``INSERT ... ON CONFLICT DO NOTHING``: a record the dead process had written already is skipped,
and two live processes never replay the same segment (the lock). A segment is created under a
name the recovery does not look at and renamed once locked, so it is never taken for a dead one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.db.models import DateTimeField
from django_tenants.utils import schema_context

from contextplatform.core import metrics
from contextplatform.replay.models import ReplayRecord

logger = logging.getLogger("contextplatform.replay")

SUFFIX = ".spool"
# Past this size the next record starts a new segment, so that one whose records are all written
# can go while the newest fills (under steady load the newest is never all written at once).
SEGMENT_BYTES = 4 * 2**20
RECOVERY_BATCH = 500

FIELDS = [field for field in ReplayRecord._meta.concrete_fields]
DATETIME_FIELDS = {field.attname for field in FIELDS if isinstance(field, DateTimeField)}


def spool_directory() -> Path:
    return Path(settings.REPLAY_SPOOL_DIR)


# --- one line per record ------------------------------------------------------------------------


def encode(schema: str, record: ReplayRecord) -> bytes:
    entry = {
        "schema": schema,
        "record": {field.attname: getattr(record, field.attname) for field in FIELDS},
    }
    try:
        return orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # what orjson refuses (integers past 64 bits...): the slower encoder
        return (json.dumps(entry, cls=DjangoJSONEncoder) + "\n").encode()


def decode(line: bytes) -> tuple[str, ReplayRecord]:
    entry = json.loads(line)
    values = entry["record"]
    for name in DATETIME_FIELDS:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    return entry["schema"], ReplayRecord(**values)


# --- this process's segments --------------------------------------------------------------------


@dataclass(eq=False)
class Segment:
    path: Path
    fd: int
    size: int = 0
    pending: int = 0  # records appended and not yet written to the database


class ReplaySpool:
    """This process's segments: ``append`` before the answer, ``done`` once written."""

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._current: Segment | None = None
        self._segments: list[Segment] = []
        self._pid = os.getpid()
        self._sequence = 0

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else spool_directory()

    def append(self, schema: str, record: ReplayRecord) -> Segment:
        line = encode(schema, record)
        with self._lock:
            segment = self._writable()
            written = 0
            while written < len(line):  # a regular file takes it whole; a short write goes on
                written += os.write(segment.fd, line[written:])
            segment.size += len(line)
            segment.pending += 1
            return segment

    def done(self, segments: Iterable[Segment]) -> None:
        """These records (one entry per record) are in the database."""
        with self._lock:
            for segment in segments:
                segment.pending -= 1
                if segment.pending > 0 or segment not in self._segments:
                    continue
                if segment is self._current:
                    os.ftruncate(segment.fd, 0)
                    segment.size = 0
                else:  # removed before it is closed: a recovery never finds it unlocked
                    self._segments.remove(segment)
                    with contextlib.suppress(FileNotFoundError):
                        segment.path.unlink()
                    os.close(segment.fd)

    def close(self) -> None:
        """At a clean exit, once the writer is drained: the segments whose records are all
        written go (one still holding a record that could not be written stays, for replay)."""
        with self._lock:
            if self._pid != os.getpid():
                return
            for segment in [s for s in self._segments if s.pending <= 0]:
                self._segments.remove(segment)
                with contextlib.suppress(FileNotFoundError):
                    segment.path.unlink()
                os.close(segment.fd)
            if self._current not in self._segments:
                self._current = None

    def _writable(self) -> Segment:
        if self._pid != os.getpid():  # a forked child: the parent's segments stay the parent's
            for segment in self._segments:
                os.close(segment.fd)
            self._segments, self._current, self._pid = [], None, os.getpid()
        if self._current is None or self._current.size >= SEGMENT_BYTES:
            self._current = self._open()
            self._segments.append(self._current)
        return self._current

    def _open(self) -> Segment:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        name = f"{self._pid}-{time.time_ns()}-{self._sequence}"
        hidden = directory / f".{name}.new"
        fd = os.open(hidden, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = directory / f"{name}{SUFFIX}"
        os.rename(hidden, path)
        return Segment(path=path, fd=fd)


# --- the segments of dead processes -------------------------------------------------------------


@dataclass
class Recovery:
    segments: int = 0
    records: int = 0  # distinct records found (those already written are skipped by the insert)
    failed: int = 0


_recovering = threading.Lock()


def recover_dead_spools(directory: Path | None = None) -> Recovery:
    """Replay every segment no live process holds into the database, then remove it. A segment
    whose records could not reach the database (it is down) stays for the next try."""
    directory = directory if directory is not None else spool_directory()
    recovery = Recovery()
    if not directory.is_dir():
        return recovery
    with _recovering, contextlib.ExitStack() as held:
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            fd = _lock_if_dead(path)
            if fd is None:
                continue
            held.callback(os.close, fd)
            entries = {}
            # The same record can appear twice (a call's record spooled at resolve, then again
            # complete at its end): the later line is the record.
            for schema, record in _read(fd, path):
                entries[(schema, record.id)] = record
            try:
                recovery.failed += _insert(entries)
            except (OperationalError, InterfaceError):
                logger.warning("replay spool %s kept: the database is unreachable", path)
                connection.close()
                continue
            recovery.segments += 1
            recovery.records += len(entries)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    if recovery.segments:
        logger.info(
            "replayed %d spooled replay records from %d segments of ended processes",
            recovery.records,
            recovery.segments,
        )
    return recovery


def _lock_if_dead(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # written and removed meanwhile
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its process is alive (or another one is replaying it)
        os.close(fd)
        return None
    return fd


def _read(fd: int, path: Path) -> Iterator[tuple[str, ReplayRecord]]:
    with os.fdopen(os.dup(fd), "rb") as spooled:
        for line in spooled:
            try:
                yield decode(line)
            except ValueError:  # a line cut by the kill: its call was never answered
                logger.warning("replay spool %s: an incomplete line skipped", path)


def _insert(entries: dict[tuple[str, str], ReplayRecord]) -> int:
    """Insert what is not there yet, per tenant; the records that could not be written."""
    by_schema: dict[str, list[ReplayRecord]] = {}
    for (schema, _), record in entries.items():
        by_schema.setdefault(schema, []).append(record)
    failed = 0
    for schema, records in by_schema.items():
        with schema_context(schema):
            for start in range(0, len(records), RECOVERY_BATCH):
                batch = records[start : start + RECOVERY_BATCH]
                try:
                    ReplayRecord.objects.bulk_create(batch, ignore_conflicts=True)
                except (OperationalError, InterfaceError):
                    raise
                except DatabaseError:
                    failed += _insert_one_by_one(schema, batch)
    return failed


def _insert_one_by_one(schema: str, records: list[ReplayRecord]) -> int:
    failed = 0
    for record in records:
        try:
            ReplayRecord.objects.bulk_create([record], ignore_conflicts=True)
        except (OperationalError, InterfaceError):
            raise
        except DatabaseError:
            failed += 1
            metrics.REPLAY_WRITE_FAILURES.inc()
            logger.error(
                "spooled replay record %s of tenant %s could not be written",
                record.id,
                schema,
                exc_info=True,
            )
    return failed
