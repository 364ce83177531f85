"""Fake models on loopback, built on ``tests/loopback.py``: an OpenAI-compatible chat model and an
OpenAI-compatible embeddings endpoint, each with the slow and broken variants the clients'
failure paths need. Real HTTP on 127.0.0.1, so the clients run exactly as they do in production.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.loopback import Reply, Seen, Service, json_reply, running_service

# --- an OpenAI-compatible chat model -------------------------------------------------------------

# What a played model answers: a status and a raw body, or a whole ``Reply`` (headers, a delay).
ModelReply = tuple[int, bytes] | Reply


def chat_completion(content: Any, *, model: str = "fake-model") -> dict[str, Any]:
    """An OpenAI ``chat.completion`` whose one assistant message is ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


def chat_reply(content: Any, status: int = 200, **fields: Any) -> Reply:
    """The chat completion as a reply; ``fields`` are the ``Reply``'s own (e.g. ``delay_s``)."""
    return json_reply(chat_completion(content), status, **fields)


class PlayedModel:
    """A loopback service that plays a chat model: ``reply(body)`` answers each request; with
    ``hang`` set it never answers (until the service stops), for timeouts."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.reply: Callable[[dict[str, Any]], ModelReply] = lambda body: (200, b"{}")
        self.hang = False
        service.responder = self._respond

    def _respond(self, seen: Seen) -> Reply:
        if self.hang:
            return Reply(delay_s=30)
        answer = self.reply(seen.body)
        if isinstance(answer, Reply):
            return answer
        status, payload = answer
        return Reply(status=status, body=payload)

    @property
    def url(self) -> str:
        return self.service.base

    @property
    def seen(self) -> list[Seen]:
        with self.service.lock:
            return list(self.service.requests)


@contextmanager
def played_model() -> Iterator[PlayedModel]:
    with running_service() as service:
        yield PlayedModel(service)


# --- an OpenAI-compatible /v1/embeddings ---------------------------------------------------------


class FakeEmbeddings:
    """A loopback service that plays ``/v1/embeddings``. Each text's vector comes from its hash
    and is not of unit length, so a client that forgets to normalise is caught. ``mode`` picks
    the answer: ``ok``, ``shuffled`` (the right vectors in reverse order, found by ``index``),
    the broken ``wrong_count``, ``wrong_dims``, ``strings``, ``non_json`` and ``error`` (HTTP
    500), and the slow ``delayed`` (0.2 s) and ``slow`` (1 s)."""

    def __init__(self, service: Service, dimensions: int = 8) -> None:
        self.service = service
        self.mode = "ok"
        self.dimensions = dimensions
        service.responder = self._respond

    @property
    def url(self) -> str:
        return self.service.base

    @property
    def requests(self) -> list[Seen]:
        with self.service.lock:
            return list(self.service.requests)

    def stop(self) -> None:
        """Close the port: from now on the endpoint is unreachable."""
        self.service.stop()

    def vector(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [float(digest[i] + 1) for i in range(self.dimensions)]

    def _respond(self, seen: Seen) -> Reply:
        inputs = seen.body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": self.vector(text)}
            for i, text in enumerate(inputs)
        ]
        delay_s = 0.0
        if self.mode == "wrong_count":
            data = data[:-1]
        elif self.mode == "wrong_dims":
            data = [{**item, "embedding": item["embedding"][:-1]} for item in data]
        elif self.mode == "strings":
            data = [{**item, "embedding": "AAAA"} for item in data]
        elif self.mode == "shuffled":
            data = list(reversed(data))
        elif self.mode == "non_json":
            return Reply(body=b"<html>gateway</html>")
        elif self.mode == "error":
            return Reply(status=500, body=b'{"error": "boom"}')
        elif self.mode == "slow":
            delay_s = 1.0
        elif self.mode == "delayed":
            delay_s = 0.2
        return json_reply({"object": "list", "data": data, "model": "fake"}, delay_s=delay_s)


@contextmanager
def fake_embeddings(dimensions: int = 8) -> Iterator[FakeEmbeddings]:
    with running_service() as service:
        yield FakeEmbeddings(service, dimensions)
