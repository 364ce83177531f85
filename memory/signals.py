"""What the memory services announce once memories change in PostgreSQL, for the external
indexes that mirror them (``memory.stores.sync`` listens). Signals, so the services know nothing
of the stores built on them."""

from __future__ import annotations

from django.dispatch import Signal

# ids: the memories written or changed (content, expiry, superseded).
memories_written = Signal()
# ids: the memories deleted.
memories_deleted = Signal()
# user_id: every memory of the user deleted.
user_erased = Signal()
