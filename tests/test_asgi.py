"""``contextplatform.asgi.application`` speaks the ASGI lifespan protocol, in process and under a
real uvicorn (which otherwise logs "ASGI 'lifespan' protocol appears unsupported" at every start)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import httpx
import pytest
from asgiref.testing import ApplicationCommunicator

from contextplatform.asgi import application
from contextplatform.replay.ids import new_resolve_id
from tests import live
from tests.replay.test_writer import delete_committed, ids_in, record


async def lifespan_answers() -> list[str]:
    communicator = ApplicationCommunicator(application, {"type": "lifespan", "asgi": {}})
    await communicator.send_input({"type": "lifespan.startup"})
    started = await communicator.receive_output(timeout=5)
    await communicator.send_input({"type": "lifespan.shutdown"})
    stopped = await communicator.receive_output(timeout=5)
    await communicator.wait(timeout=5)  # the app returns after the shutdown
    return [started["type"], stopped["type"]]


def test_the_application_completes_startup_and_shutdown() -> None:
    from asgiref.sync import async_to_sync

    assert async_to_sync(lifespan_answers)() == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def test_uvicorn_runs_the_lifespan_without_complaint(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    port = live.free_port()
    args = [sys.executable, "-m", "uvicorn", "contextplatform.asgi:application"]
    args += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", *live.SERVER_PROTOCOL]
    with django_db_blocker.unblock():
        environment = {"DATABASE_URL": live.test_database_url()}
    with live.running(args, environment) as server:
        for _ in range(300):
            if server.poll() is not None:
                break
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        server.terminate()
        server.wait(timeout=20)
        log = server.stderr.read() if server.stderr else ""
    assert "Application startup complete" in log, log
    assert "Application shutdown complete" in log, log
    assert "lifespan" not in log.lower(), log


def test_start_up_objects_are_frozen_out_of_the_garbage_collector() -> None:
    """Importing the ASGI application freezes what start-up loaded and makes young collections
    rarer: full collections of the whole heap were the resolve's p99 under load."""
    import gc

    assert gc.get_freeze_count() > 10_000  # Django, the apps and their modules
    assert gc.get_threshold()[0] == 10_000


@pytest.mark.django_db
def test_the_shutdown_completes_once_the_accepted_replay_records_are_written(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stopped by SIGTERM dies as soon as the application has shut down (uvicorn raises
    the signal again under the default handler), so atexit hooks never run: the records its
    writer still holds are written by the lifespan's shutdown, before it completes."""
    from asgiref.sync import async_to_sync

    from contextplatform.replay import writer as replay_writer

    settings.REPLAY_WRITES = "background"
    held = threading.Event()
    write_records = replay_writer.write_records

    def slow_write(schema: str, records: list[Any]) -> set[str]:
        held.wait(timeout=10)
        return write_records(schema, records)

    monkeypatch.setattr(replay_writer, "write_records", slow_write)
    record_id = new_resolve_id()
    try:
        replay_writer.REPLAY_WRITER.submit("acme", record(record_id))
        threading.Timer(0.3, held.set).start()  # the write lands 0.3 s from now, no sooner
        assert async_to_sync(lifespan_answers)()[1] == "lifespan.shutdown.complete"
        assert ids_in("acme", [record_id]) == {record_id}
    finally:
        held.set()
        replay_writer.REPLAY_WRITER.flush()
        delete_committed([record_id])
