"""Waiting for a replay record that may still be on its way to the table (written off the resolve
path by the writer, in this process or another)."""

from __future__ import annotations

import time

from contextplatform.replay.ids import resolve_id_age_s
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import flush_current_tenant

REPLAY_ARRIVAL_S = 2.0
REPLAY_POLL_S = 0.05
CLOCK_SLACK_S = 1.0


def await_replay(record_id: str, wait_s: float = REPLAY_ARRIVAL_S) -> bool:
    """Whether the record exists, waiting for it if it may still be on its way: this process's
    writer is flushed, and a record another worker process accepted lands within milliseconds, so
    a resolve id issued in the last ``wait_s`` seconds (plus a second of clock slack) is looked
    for again until ``wait_s`` has passed; an older id, or one of another form, is answered at
    once."""
    flush_current_tenant()
    age = resolve_id_age_s(record_id)
    may_arrive = age is not None and -CLOCK_SLACK_S <= age <= wait_s + CLOCK_SLACK_S
    deadline = time.monotonic() + (wait_s if may_arrive else 0.0)
    while not ReplayRecord.objects.filter(pk=record_id).exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(REPLAY_POLL_S)
    return True
