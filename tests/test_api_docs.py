"""``/api/docs/`` renders offline: Swagger UI's scripts, styles and icon are the project's own
static files (``drf-spectacular-sidecar``), served by the ASGI application, never a CDN's."""

from __future__ import annotations

import re
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.test import Client

from contextplatform.asgi import application

ASSET = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def asset_urls(page: str) -> list[str]:
    """The URLs of the page's scripts, styles and icons (the schema's URL is fetched by script)."""
    return [url for url in ASSET.findall(page) if re.search(r"\.(js|css|png|ico)(\?|$)", url)]


async def statuses(paths: list[str]) -> dict[str, int]:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return {path: (await client.get(path)).status_code for path in paths}


def test_swagger_ui_loads_only_local_assets(db: Any) -> None:
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assets = asset_urls(page)
    assert any(url.endswith("swagger-ui-bundle.js") for url in assets), page
    assert any(url.endswith("swagger-ui.css") for url in assets), page
    assert all(url.startswith("/static/") for url in assets), assets
    assert "cdn" not in page.lower()
    assert set(async_to_sync(statuses)(assets).values()) == {200}
