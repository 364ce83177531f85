"""How a replay record names each item it decided on, so that two decisions of the same request
(the recorded one and a rerun's) can be compared item by item.

An item is named by its source and its ``id``: the document id of a RAG item, the memory id of a
memory, and for any other item (history, a profile, guardrail texts) a hash of its content
(``sha256:`` and the first 16 hex digits of the text's SHA-256). Records written before items kept
an ``id`` carry neither the id nor the content (content is never in an item's entry): their items
are matched by source and title instead (``legacy_key``)."""

from __future__ import annotations

import hashlib
from typing import Any

from sources.base import ContextItem


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def item_id(item: ContextItem) -> str:
    """The item's name within its source, as the replay record keeps it."""
    metadata = item.metadata or {}
    for key in ("document_id", "memory_id"):
        value = metadata.get(key)
        if value is not None and value != "":
            return str(value)
    return content_hash(item.content)


def has_ids(items: list[dict[str, Any]]) -> bool:
    """Whether a record's items carry ids (records written before they did carry none)."""
    return all(item.get("id") is not None for item in items)


def id_key(item: dict[str, Any]) -> tuple[str, str]:
    return str(item.get("source")), str(item.get("id"))


def legacy_key(item: dict[str, Any]) -> tuple[str, str]:
    return str(item.get("source")), str(item.get("title") or "")
