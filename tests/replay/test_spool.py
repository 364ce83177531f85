"""The replay writer's write-ahead spool: what a process spooled and did not write is replayed into
the database once that process is gone, once, and never while it lives.

A dead process is played by a forked child that spools records and exits without writing them
(``os._exit``: no flush, no atexit), as a SIGKILLed worker leaves its spool."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.replay.ids import new_resolve_id
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.spool import (
    SUFFIX,
    ReplaySpool,
    decode,
    encode,
    recover_dead_spools,
)
from contextplatform.replay.writer import ReplayWriter
from tests.replay.test_writer import delete_committed, ids_in

pytestmark = pytest.mark.django_db


def record(record_id: str, **values: Any) -> ReplayRecord:
    return ReplayRecord(
        id=record_id,
        route="spooled",
        status="ok",
        format="openai",
        created_at=timezone.now(),
        duration_ms=2.5,
        **values,
    )


def spooled_by_a_dead_process(directory: Path, entries: list[tuple[str, ReplayRecord]]) -> None:
    """A child process spools ``entries`` and dies with them unwritten."""
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's coverage is not collected)
        try:
            spool = ReplaySpool(directory)
            for schema, spooled in entries:
                spool.append(schema, spooled)
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def spool_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "spool"


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}"))


def count_of(schema: str, ids: list[str]) -> int:
    with schema_context(schema):
        return ReplayRecord.objects.filter(id__in=ids).count()


def test_a_dead_process_spool_is_replayed_into_each_tenant_once(spool_dir: Path) -> None:
    acme_ids = [new_resolve_id() for _ in range(5)]
    globex_id = new_resolve_id()
    entries = [("acme", record(i, request_body={"n": 2**70})) for i in acme_ids]
    spooled_by_a_dead_process(spool_dir, [*entries, ("globex", record(globex_id))])
    kept = spool_dir.parent / "copy"
    shutil.copytree(spool_dir, kept)
    with schema_context("acme"):  # written by the dead process before it died: skipped
        record(acme_ids[0]).save(force_insert=True)

    recovery = recover_dead_spools(spool_dir)
    assert (recovery.segments, recovery.records, recovery.failed) == (1, 6, 0)
    assert ids_in("acme", acme_ids) == set(acme_ids) and ids_in("globex", [globex_id]) == {
        globex_id
    }
    with schema_context("acme"):
        replayed = ReplayRecord.objects.get(id=acme_ids[1])
    assert replayed.request_body == {"n": 2**70} and replayed.duration_ms == 2.5
    assert segments(spool_dir) == []

    # The same spool replayed again (a second process that found it too): no duplicate, no error.
    shutil.rmtree(spool_dir)
    shutil.copytree(kept, spool_dir)
    assert recover_dead_spools(spool_dir).failed == 0
    assert count_of("acme", acme_ids) == 5 and count_of("globex", [globex_id]) == 1
    assert recover_dead_spools(spool_dir).segments == 0  # nothing left to replay


def test_the_spool_of_a_live_process_is_left_to_it(spool_dir: Path) -> None:
    spool = ReplaySpool(spool_dir)
    alive = new_resolve_id()
    spool.append("acme", record(alive))
    assert recover_dead_spools(spool_dir).segments == 0
    assert ids_in("acme", [alive]) == set() and len(segments(spool_dir)) == 1


def test_a_record_spooled_twice_is_replayed_as_it_was_last(spool_dir: Path) -> None:
    """A gateway call's record is spooled at resolve and again, complete, at the call's end."""
    call = new_resolve_id()
    early = record(call)
    complete = record(call, response_body={"choices": []}, tool_calls=[{"tool": "t"}])
    spooled_by_a_dead_process(spool_dir, [("acme", early), ("acme", complete)])
    assert recover_dead_spools(spool_dir).records == 1
    with schema_context("acme"):
        replayed = ReplayRecord.objects.get(id=call)
    assert replayed.response_body == {"choices": []} and replayed.tool_calls == [{"tool": "t"}]


def test_a_line_cut_by_the_kill_is_skipped_and_the_rest_replayed(spool_dir: Path) -> None:
    whole = new_resolve_id()
    spooled_by_a_dead_process(spool_dir, [("acme", record(whole))])
    (segment,) = segments(spool_dir)
    cut = encode("acme", record(new_resolve_id()))
    with segment.open("ab") as spooled:
        spooled.write(cut[: len(cut) // 2])
    recovery = recover_dead_spools(spool_dir)
    assert recovery.records == 1 and ids_in("acme", [whole]) == {whole}


def test_a_spooled_line_holds_the_record_as_built() -> None:
    built = record(new_resolve_id(), tokens={"before": 10}, error={"code": "x", "message": "y"})
    schema, read = decode(encode("acme", built))
    assert schema == "acme"
    assert {f.attname: getattr(read, f.attname) for f in ReplayRecord._meta.concrete_fields} == {
        f.attname: getattr(built, f.attname) for f in ReplayRecord._meta.concrete_fields
    }


def test_the_writer_clears_its_spool_once_the_records_are_written_and_removes_it_at_exit(
    spool_dir: Path, settings: Any
) -> None:
    settings.REPLAY_WRITES = "background"
    writer = ReplayWriter(ReplaySpool(spool_dir))
    ids = [new_resolve_id() for _ in range(70)]  # more than one batch
    try:
        for record_id in ids:
            writer.submit("acme", record(record_id))
        (segment,) = segments(spool_dir)
        assert writer.flush(timeout_s=30)
        assert ids_in("acme", ids) == set(ids)
        assert segment.stat().st_size == 0  # all written: nothing left to replay
        assert writer.close() and segments(spool_dir) == []  # a clean exit leaves no file
    finally:
        delete_committed(ids)


def test_a_deferred_record_is_spooled_at_resolve_and_cleared_with_its_final_write(
    spool_dir: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's record: spooled as the resolve left it (a process killed mid-call leaves
    it), then complete at the call's end; both lines go once the record is written."""
    from contextplatform.replay import writer as replay_writer

    settings.REPLAY_WRITES = "background"
    writer = ReplayWriter(ReplaySpool(spool_dir))
    monkeypatch.setattr(replay_writer, "REPLAY_WRITER", writer)
    call = new_resolve_id()
    try:
        pending = replay_writer.PendingReplay("acme", record(call))
        (segment,) = segments(spool_dir)
        assert [decode(line)[1].id for line in segment.read_bytes().splitlines()] == [call]
        pending.record.response_body = {"choices": [{"message": {"content": "Done."}}]}
        pending.submit()
        assert writer.flush(timeout_s=30)
        with schema_context("acme"):
            written = ReplayRecord.objects.get(id=call)
        assert written.response_body == {"choices": [{"message": {"content": "Done."}}]}
        assert segment.stat().st_size == 0
    finally:
        delete_committed([call])
