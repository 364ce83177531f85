"""``contextplatform.asgi.application`` speaks the ASGI lifespan protocol, in process and under a
real uvicorn (which otherwise logs "ASGI 'lifespan' protocol appears unsupported" at every start)."""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx
from asgiref.testing import ApplicationCommunicator

from contextplatform.asgi import application
from tests import live


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
    args += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
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
