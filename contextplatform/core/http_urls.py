"""The shape every configured outbound URL must have (a deployment's base URL, an MCP server's):
checked where it is written, before the outbound guard checks where it points."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx


def checked_http_url(value: str, *, scheme_hint: str = "", credentials_hint: str) -> str:
    """``value`` when it is an http(s) URL with a host and nothing that belongs elsewhere
    (credentials, a fragment, spaces); else ValueError. The hints finish the messages with what
    the caller's resource offers instead."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError:
        raise ValueError("not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host{scheme_hint}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"must not hold credentials ({credentials_hint})")
    if parts.fragment or value.endswith("#"):
        raise ValueError("must not have a fragment")
    if any(c.isspace() for c in value):
        raise ValueError("must not contain spaces")
    try:
        # What the outbound client will parse: a host urlsplit takes but httpx refuses (an IPv4
        # address in octal or zero-padded parts, 0177.0.0.1) would fail every call instead.
        httpx.URL(value)
    except httpx.InvalidURL as error:
        raise ValueError(f"not a valid URL: {error}") from None
    return value
