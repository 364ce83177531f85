"""Event messages queued while the background sender was busy go out as one group send per group,
their events joined in order; other messages are sent as they are."""

from __future__ import annotations

from typing import Any

from contextplatform.core.live_events import EVENT_TYPE, joined


class Layer:
    pass


def events(*names: str) -> dict[str, Any]:
    return {"type": EVENT_TYPE, "events": [{"source": name} for name in names]}


def test_event_messages_of_a_group_are_joined_in_order() -> None:
    layer = Layer()
    queued = [
        (layer, "metrics.acme", events("a", "b")),
        (layer, "metrics.globex", events("x")),
        (layer, "metrics.acme", events("c")),
        (layer, "metrics.acme", {"type": "other.kind", "value": 1}),
    ]
    sent = joined(queued)  # type: ignore[arg-type]
    assert [(group, message, count) for _, group, message, count in sent] == [
        ("metrics.acme", events("a", "b", "c"), 2),
        ("metrics.globex", events("x"), 1),
        ("metrics.acme", {"type": "other.kind", "value": 1}, 1),
    ]
    assert queued[0][2] == events("a", "b")  # the queued message itself is left as it was


def test_two_layers_are_never_joined() -> None:
    first, second = Layer(), Layer()
    sent = joined([(first, "g", events("a")), (second, "g", events("b"))])  # type: ignore[list-item]
    assert [(layer, message) for layer, _, message, _ in sent] == [
        (first, events("a")),
        (second, events("b")),
    ]
