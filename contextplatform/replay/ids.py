"""Resolve ids: the replay record's key, issued when a resolve starts."""

from __future__ import annotations

import re
import secrets
import time

RESOLVE_ID = re.compile(r"rsv_[0-9a-f]{24}")


def new_resolve_id() -> str:
    """``rsv_``, the issue time (8 hex digits of Unix seconds), 16 random hex digits: ids sort by
    time, and a reader can tell whether a record may still be on its way to the table."""
    return f"rsv_{int(time.time()):08x}{secrets.token_hex(8)}"


def resolve_id_age_s(record_id: str) -> float | None:
    """Seconds since a resolve id was issued; None for an id of another form."""
    if not RESOLVE_ID.fullmatch(record_id):
        return None
    return time.time() - int(record_id[4:12], 16)
