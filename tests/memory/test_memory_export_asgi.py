"""The memory export streams under ASGI as under WSGI: the same JSON Lines, page by page, from an
asynchronous iterator, so Django neither warns that it must consume a synchronous one nor reads
the whole export into memory first."""

from __future__ import annotations

import json
import logging
import warnings
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from memory import views as memory_views
from tests.conftest import ApiClient, TenantFixture

SYNC_ITERATOR_WARNING = "must consume synchronous iterators"


async def exported(key: str, user: str) -> tuple[Any, bytes]:
    response = await AsyncClient().get(
        f"/api/v1/users/{user}/memories/export", headers={"Authorization": f"Bearer {key}"}
    )
    body = b"".join([chunk async for chunk in response])
    return response, body


def test_the_export_streams_asynchronously_without_the_warning(
    acme: TenantFixture,
    acme_api: ApiClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(memory_views, "EXPORT_PAGE", 2)  # several pages
    contents = {f"fact {i}: naïve café" for i in range(5)}
    for content in contents:
        created = acme_api.post("/api/v1/users/u1/memories", {"content": content})
        assert created.status_code == 201, created.content
    acme_api.post("/api/v1/users/u2/memories", {"content": "someone else's"})
    caplog.set_level(logging.WARNING, logger="django.request")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response, body = async_to_sync(exported)(acme.key, "u1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert {line["content"] for line in lines} == contents
    assert all(line["user"] == "u1" for line in lines)
    assert not [w for w in caught if SYNC_ITERATOR_WARNING in str(w.message)]
    assert SYNC_ITERATOR_WARNING not in caplog.text
    assert response.is_async  # an asynchronous iterator, served as such


def test_the_wsgi_export_stays_synchronous(acme_api: ApiClient) -> None:
    acme_api.post("/api/v1/users/u1/memories", {"content": "kept"})
    response = acme_api.get("/api/v1/users/u1/memories/export")
    assert response.status_code == 200
    assert not response.is_async
    assert json.loads(b"".join(response.streaming_content))["content"] == "kept"
