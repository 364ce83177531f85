"""Two decisions of one request side by side, and what changed between them, item by item: the
decision a replay record kept, and the decision a rerun of its request made (against the route as
it is now, or a draft of it). Pure: it reads the shapes ``resolver.save_replay`` writes (the
rerun's ``Resolution`` reports the same ones).

A side is compact: per source its status and counts (and the judge's cost, where one judged),
per item its source, id, title, score, tokens, decision and, when kept, its rank among the kept
items. The diff names each item by source and id (``item_keys``):

- ``added``: kept now, not before (``before`` says whether it was recalled and not kept, or not
  recalled at all); ``dropped``: kept before, not now (``now`` likewise);
- ``moved``: kept both times at another rank (its score both times beside);
- ``changed``: kept both times at the same rank with another score;
- ``sources``: the sources whose status or kept count changed (or that only one side has);
- ``tokens``: the request's tokens as the model would receive it, then and now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from contextplatform.replay.item_keys import has_ids, id_key, legacy_key

Key = tuple[str, str, int]
JUDGE_COUNTS = ("calls", "input_tokens", "output_tokens")
SCORE_DIGITS = 4


def side(
    *,
    status: str,
    sources: list[dict[str, Any]],
    items: list[dict[str, Any]],
    tokens: dict[str, Any],
) -> dict[str, Any]:
    """One decision, compact."""
    source_lines = [source_line(s) for s in sources]
    usages = [line["judge_usage"] for line in source_lines if "judge_usage" in line]
    return {
        "status": status,
        "sources": source_lines,
        "items": ranked(items),
        "tokens": {"before": tokens.get("before"), "after": tokens.get("after")},
        "judge_usage": total_usage(usages) if usages else None,
    }


def source_line(source: dict[str, Any]) -> dict[str, Any]:
    line = {key: source.get(key) for key in ("name", "type", "status", "items", "kept")}
    if source.get("error"):
        line["error"] = source["error"]
    usage = (source.get("notes") or {}).get("judge_usage")
    if usage:
        line["judge_usage"] = usage
    return line


def ranked(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item as a side shows it; a kept item with its rank among the kept (1 first)."""
    lines, rank = [], 0
    for item in items:
        line = {
            key: item.get(key)
            for key in ("source", "id", "title", "score", "tokens", "kept", "reason")
        }
        if item.get("kept"):
            rank += 1
            line["rank"] = rank
        lines.append(line)
    return lines


def total_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {key: sum(int(u.get(key) or 0) for u in usages) for key in JUDGE_COUNTS}
    costs = [u.get("cost_usd") for u in usages]
    total["cost_usd"] = None if any(c is None for c in costs) else round(sum(costs), 6)
    return total


def keyed(
    items: list[dict[str, Any]], key: Callable[[dict[str, Any]], tuple[str, str]]
) -> dict[Key, dict[str, Any]]:
    """The items by (source, id, occurrence): two chunks of one document are two items."""
    seen: Counter[tuple[str, str]] = Counter()
    out: dict[Key, dict[str, Any]] = {}
    for item in items:
        name = key(item)
        out[(*name, seen[name])] = item
        seen[name] += 1
    return out


def score(item: dict[str, Any]) -> float | None:
    value = item.get("score")
    return None if value is None else round(float(value), SCORE_DIGITS)


def named(item: dict[str, Any]) -> dict[str, Any]:
    return {"source": item.get("source"), "id": item.get("id"), "title": item.get("title")}


def elsewhere(item: dict[str, Any] | None) -> str | None:
    """What became of an item on the other side: not recalled at all (None), or its reason."""
    if item is None:
        return None
    return f"not kept: {item.get('reason') or 'no reason given'}"


def diff(recorded: dict[str, Any], rerun: dict[str, Any]) -> dict[str, Any]:
    """What changed from the ``recorded`` side to the ``rerun`` side (both from ``side``)."""
    by_id = has_ids(recorded["items"])
    key = id_key if by_id else legacy_key
    before, now = keyed(recorded["items"], key), keyed(rerun["items"], key)
    added, dropped, moved, changed = [], [], [], []
    for name, item in now.items():
        old = before.get(name)
        if item.get("kept") and not (old and old.get("kept")):
            added.append(
                {
                    **named(item),
                    "rank": item["rank"],
                    "score": item.get("score"),
                    "before": elsewhere(old),
                }
            )
    for name, old in before.items():
        item = now.get(name)
        if not old.get("kept"):
            continue
        if not (item and item.get("kept")):
            dropped.append(
                {
                    **named(old),
                    "rank": old["rank"],
                    "score": old.get("score"),
                    "now": elsewhere(item),
                }
            )
            continue
        scores = {"recorded": old.get("score"), "rerun": item.get("score")}
        if old["rank"] != item["rank"]:
            moved.append(
                {
                    **named(item),
                    "rank": {"recorded": old["rank"], "rerun": item["rank"]},
                    "score": scores,
                }
            )
        elif score(old) != score(item):
            changed.append({**named(item), "rank": item["rank"], "score": scores})
    return {
        "matched_by": "id" if by_id else "source_and_title",
        "added": added,
        "dropped": dropped,
        "moved": moved,
        "changed": changed,
        "sources": source_changes(recorded["sources"], rerun["sources"]),
        "tokens": {"recorded": recorded["tokens"]["after"], "rerun": rerun["tokens"]["after"]},
    }


def source_changes(
    recorded: list[dict[str, Any]], rerun: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    before = {s["name"]: s for s in recorded}
    now = {s["name"]: s for s in rerun}
    changes = []
    for name in [*before, *(n for n in now if n not in before)]:
        old, new = before.get(name) or {}, now.get(name) or {}
        if old.get("status") != new.get("status") or old.get("kept") != new.get("kept"):
            changes.append(
                {
                    "name": name,
                    "status": {"recorded": old.get("status"), "rerun": new.get("status")},
                    "kept": {"recorded": old.get("kept"), "rerun": new.get("kept")},
                }
            )
    return changes


def is_empty(changes: dict[str, Any]) -> bool:
    """No item, source or token count changed."""
    tokens = changes["tokens"]
    lists = ("added", "dropped", "moved", "changed", "sources")
    return not any(changes[name] for name in lists) and tokens["recorded"] == tokens["rerun"]


def items_changed(changes: dict[str, Any]) -> int:
    return len(changes["added"]) + len(changes["dropped"]) + len(changes["moved"])
