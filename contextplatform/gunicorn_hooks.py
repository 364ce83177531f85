"""gunicorn's server hooks for ``make run`` (``--config contextplatform/gunicorn_hooks.py``).

The arbiter outlives its uvicorn workers, which hold the embedded PostgreSQL but end without
running their ``atexit`` hook (they raise the signal they caught again under the default handler):
on its way out, once its workers are gone, the arbiter stops the server that no live process
holds any more. With ``DATABASE_URL`` set, nothing is done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent


def on_exit(server: Any) -> None:
    # Imported when called: gunicorn reads this file before it puts the project on sys.path.
    from contextplatform.database import stop_if_unused

    if stop_if_unused(BASE_DIR):
        server.log.info("Stopped the embedded PostgreSQL: no process uses it any more")
