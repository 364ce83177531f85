"""The one parse of outbound URLs, whatever library then sends the request: httpx's, so that the
host the guard checks is the host httpx connects to; the httpx2 and aiohttp adapters check the
same parse of their URLs (and connect only to addresses the policy checked, whatever they parse).
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from contextplatform.core.outbound.policy import (
    OutboundBlocked,
    OutboundPolicy,
    check_target,
    display,
)


def display_url(url: httpx.URL) -> str:
    """The URL without credentials or query, for messages and logs."""
    return display(url.scheme, url.host, url.port, url.path)


def target(url: str | httpx.URL) -> tuple[httpx.URL, str, int]:
    """The URL parsed, its host and port; ``OutboundBlocked`` unless it is an http(s) URL with a
    host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as error:
        raise OutboundBlocked(f"not a valid URL: {error}") from error
    host, port = check_target(parsed.scheme, parsed.host, parsed.port)
    return parsed, host, port


def check_url(url: str, allowlist: Sequence[str], *, allow_private: bool | None = None) -> None:
    """Raise OutboundBlocked unless ``url`` may be fetched for a tenant with ``allowlist``."""
    policy = OutboundPolicy.from_allowlist(allowlist, allow_private=allow_private)
    _, host, port = target(url)
    policy.check_now(host, port)


async def check_before_sending(policy: OutboundPolicy, url: str | httpx.URL) -> None:
    """The check of every request (each redirect too) before it is sent."""
    _, host, port = target(url)
    await policy.check_before_sending(host, port)
