"""The demo's API key and admin password, kept across starts of ``make run``.

The database holds only a key's SHA-256, so the plain key has to live somewhere else to be printed
again: a JSON file readable by its owner alone (``var/demo-credentials.json``, git-ignored, or
``DEMO_CREDENTIALS_FILE``), one entry per database, so that ``make run`` and ``make cluster`` on
their own databases each keep their own. ``DEMO_API_KEY`` and ``DEMO_ADMIN_PASSWORD`` set them
instead; ``DEMO_ROTATE=1`` (or ``bootstrap_demo --rotate``) replaces both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_FILE = Path("var") / "demo-credentials.json"
ROTATE_VALUES = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Stored:
    api_key: str | None
    admin_password: str | None


def credentials_file(base_dir: Path, environ: Mapping[str, str]) -> Path:
    named = environ.get("DEMO_CREDENTIALS_FILE", "").strip()
    return Path(named) if named else base_dir / DEFAULT_FILE


def rotation_asked(environ: Mapping[str, str]) -> bool:
    return environ.get("DEMO_ROTATE", "").strip().lower() in ROTATE_VALUES


def database_identity(settings: Mapping[str, Any]) -> str:
    """Which database the credentials belong to: its host (the embedded server's is its data
    folder, where its socket lives), port and name; never its user or password."""
    return f"postgresql://{settings.get('HOST', '')}:{settings.get('PORT', '')}/{settings.get('NAME', '')}"


def _entries(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing or unreadable: the credentials are made again
    return data if isinstance(data, dict) else {}


def read_stored(path: Path, database: str) -> Stored:
    entry = _entries(path).get(database)
    if not isinstance(entry, dict):
        return Stored(None, None)
    key, password = entry.get("api_key"), entry.get("admin_password")
    return Stored(
        key if isinstance(key, str) and key else None,
        password if isinstance(password, str) and password else None,
    )


def write_stored(path: Path, database: str, tenant: str, stored: Stored) -> None:
    """Replace this database's entry, keep the others; the file is created owner-only (0600)
    before any secret is written to it, and written whole through a temporary file."""
    entries = _entries(path)
    entries[database] = {
        "tenant": tenant,
        "api_key": stored.api_key,
        "admin_password": stored.admin_password,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        json.dump(entries, handle, indent=2)
        handle.write("\n")
    os.replace(temporary, path)
