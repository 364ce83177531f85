"""The outbound guard's one policy, whatever HTTP library sends the request.

A request may only reach a globally routable address, unless the tenant's allow-list names the
host, the IP or a network containing it, on any port or on the request's one (``host:port``), or
the operator sets OUTBOUND_ALLOW_PRIVATE. Each adapter (``httpx_client``, ``httpx2_client``,
``aiohttp_client``) checks addresses twice with what is here: before anything is sent, for a
clear refusal (``check_before_sending``, on every request including each redirect); and where the
connection is made, on the very addresses the socket connects to (``checked_targets``,
``PinnedBackend``: the name is resolved once, every address checked, and only those are
connected to), so that a name which resolves differently the second time (DNS rebinding) is
caught.

No HTTP library here: the adapters hand in what their library parsed and connect with what it
provides.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, NoReturn, Protocol, TypedDict, TypeVar

import anyio.to_thread

ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_MAX_REDIRECTS = 3

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
StreamT = TypeVar("StreamT")
StreamT_co = TypeVar("StreamT_co", covariant=True)
# The name operators' logging configuration knows the guard by.
logger = logging.getLogger("contextplatform.core.outbound")

SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT
UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
NAT64_PREFIXES = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


class OutboundError(Exception):
    """An outbound request was refused or its answer could not be used."""


class OutboundBlocked(OutboundError):
    """The destination is not allowed for this tenant."""


# --- addresses ---------------------------------------------------------------------------------


def _canonical(ip: IPAddress) -> IPAddress:
    """``::ffff:a.b.c.d`` is a.b.c.d: judge (and allow-list) it as the IPv4 address it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in prefix for prefix in NAT64_PREFIXES):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be reached without an allow-list entry, or None if it is public."""
    ip = _canonical(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and (reason := refusal_reason(embedded)):
            return f"embeds {reason} {embedded}"
    checks: list[tuple[bool, str]] = [
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip in SHARED_ADDRESS_SPACE, "shared address space (CGNAT)"),
        (ip in UNIQUE_LOCAL, "unique local"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
        (not ip.is_global, "not globally routable"),
    ]
    return next((label for refused, label in checks if refused), None)


def parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (what the socket layer may connect to)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise OutboundError(f"cannot resolve {host}: {error}") from error
    addresses = [parse_ip(str(info[4][0])) for info in infos]
    found = list(dict.fromkeys(address for address in addresses if address is not None))
    if not found:
        raise OutboundError(f"cannot resolve {host}: no address")
    return found


async def resolve_async(host: str, port: int) -> list[IPAddress]:
    literal = parse_ip(host)
    if literal is not None:
        return [literal]
    # A slow resolver must not hold a cancelled caller (a source at its deadline): the lookup's
    # thread is left to finish on its own.
    return await anyio.to_thread.run_sync(_resolve, host, port, abandon_on_cancel=True)


# --- the allow-list ----------------------------------------------------------------------------

ENTRY_FORMS = "a host name, an IP, host:port, [IPv6]:port or a CIDR"
BRACKETED = re.compile(r"\[(?P<host>[^\[\]]+)\](?::(?P<port>[^:]*))?")


def _normalise_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


@dataclass(frozen=True)
class AllowEntry:
    """One allow-list entry: a host name or a network, on one port or (``port`` None) on any."""

    target: str | IPNetwork
    port: int | None = None

    def _on(self, port: int) -> bool:
        return self.port is None or self.port == port

    def names(self, host: str, port: int) -> bool:
        return isinstance(self.target, str) and self.target == host and self._on(port)

    def covers(self, ip: IPAddress, port: int) -> bool:
        network = self.target
        return (
            not isinstance(network, str)
            and ip.version == network.version
            and ip in network
            and self._on(port)
        )


def _split_port(text: str, entry: str) -> tuple[str, int | None]:
    """``host:port`` and ``[IPv6]:port`` into host and port; an entry with no port (a name, an
    IPv4 address, an IPv6 address or network with its colons) as it is."""
    bracketed = BRACKETED.fullmatch(text)
    if bracketed:
        host, port = bracketed["host"], bracketed["port"]
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif text.startswith("[") or text.endswith("]"):
        raise ValueError(f"not {ENTRY_FORMS}: {entry!r}")
    else:
        return text, None
    if port is None:
        return host, None
    if not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
        raise ValueError(f"the port of {entry!r} is not a number from 1 to 65535")
    return host, int(port)


def parse_entry(entry: Any) -> AllowEntry:
    """The entry parsed; ValueError, naming it, when it is not one of ``ENTRY_FORMS``."""
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"allow-list entries are strings ({ENTRY_FORMS}), got {entry!r}")
    host, port = _split_port(entry.strip(), entry)
    text = _normalise_host(host)
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    else:
        if port is not None and "/" in text:
            raise ValueError(f"a CIDR covers every port, write it without one: {entry!r}")
        mapped = network.network_address
        if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped is not None:
            prefix = max(network.prefixlen - 96, 0)
            return AllowEntry(ipaddress.ip_network(f"{mapped.ipv4_mapped}/{prefix}"), port)
        return AllowEntry(network, port)
    if "/" in text or not _is_host_name(text):
        raise ValueError(f"not {ENTRY_FORMS}: {entry!r}")
    return AllowEntry(text, port)


def _is_host_name(text: str) -> bool:
    labels = text.split(".")
    return len(text) <= 253 and all(
        0 < len(label) <= 63
        and label[0] != "-"
        and label[-1] != "-"
        and all(c.isalnum() or c in "-_" for c in label)
        for label in labels
    )


def validate_allowlist(entries: Any) -> list[str]:
    """The entries as given, if each is one of ``ENTRY_FORMS``; ValueError naming each one that
    is not, otherwise."""
    if not isinstance(entries, list):
        raise ValueError("the outbound allow-list must be a list of strings")
    problems = []
    for entry in entries:
        try:
            parse_entry(entry)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise ValueError("; ".join(problems))
    return entries


def readable_allowlist(stored: Any) -> list[str]:
    """A stored allow-list as every reader takes it, a list of strings: one written into the
    database past the validating write paths may hold anything (a list in a list is unhashable
    where clients are kept per allow-list). What is not a string allows nothing and is logged."""
    if stored is None:
        return []
    if not isinstance(stored, list):
        logger.warning("outbound allow-list ignored, not a list: %r", stored)
        return []
    strings = [entry for entry in stored if isinstance(entry, str)]
    if len(strings) != len(stored):
        dropped = [entry for entry in stored if not isinstance(entry, str)]
        logger.warning("outbound allow-list entries ignored, not strings: %r", dropped)
    return strings


def _usable_entries(allowlist: Any) -> list[AllowEntry]:
    """The entries of a stored allow-list that parse. Every write path validates the list, but one
    written into the database directly may hold anything: an entry that does not parse allows
    nothing (its calls are refused by the guard as usual), and is logged, never a failed call."""
    if allowlist is None:
        return []
    if not isinstance(allowlist, list | tuple):
        logger.warning("outbound allow-list ignored, not a list: %r", allowlist)
        return []
    usable = []
    for entry in allowlist:
        try:
            usable.append(parse_entry(entry))
        except ValueError as error:
            logger.warning("outbound allow-list entry ignored: %s", error)
    return usable


@dataclass(frozen=True)
class OutboundPolicy:
    """What one tenant's outbound requests may reach besides public addresses: the one policy of
    every guarded client (httpx, httpx2, aiohttp), so that each reads an entry alike."""

    entries: tuple[AllowEntry, ...]
    allow_private: bool = False

    @classmethod
    def from_allowlist(cls, allowlist: Any, *, allow_private: bool | None = None) -> OutboundPolicy:
        if allow_private is None:
            allow_private = _allow_private_setting()
        return cls(entries=tuple(_usable_entries(allowlist)), allow_private=allow_private)

    def names(self, host: str, port: int) -> bool:
        """Whether an entry names ``host`` (on ``port``): its addresses are then not checked."""
        host = _normalise_host(host)
        return self.allow_private or any(entry.names(host, port) for entry in self.entries)

    def refusal(self, ip: IPAddress, port: int) -> str | None:
        ip = _canonical(ip)
        if self.allow_private or any(entry.covers(ip, port) for entry in self.entries):
            return None
        return refusal_reason(ip)

    def check_addresses(self, host: str, addresses: Sequence[IPAddress], port: int) -> None:
        for address in addresses:
            reason = self.refusal(address, port)
            if reason:
                shown = host if parse_ip(host) else f"{host} ({address})"
                raise OutboundBlocked(
                    f"outbound request to {shown} on port {port} refused: {reason} address "
                    "not in the tenant's outbound allow-list"
                )

    def check_now(self, host: str, port: int) -> None:
        """Before sending, blocking: OutboundBlocked unless ``host`` (each address it resolves to)
        may be reached on ``port``; OutboundError when it does not resolve."""
        if self.names(host, port):
            return
        literal = parse_ip(host)
        self.check_addresses(host, [literal] if literal else _resolve(host, port), port)

    async def check_before_sending(self, host: str, port: int) -> None:
        """``check_now`` for the event loop: the lookup runs in a thread."""
        if not self.names(host, port):
            self.check_addresses(host, await resolve_async(host, port), port)


def _allow_private_setting() -> bool:
    # Read where a policy is made, not at import: the policy itself needs no configured Django.
    from django.conf import settings

    return bool(getattr(settings, "OUTBOUND_ALLOW_PRIVATE", False))


# --- URLs --------------------------------------------------------------------------------------


def check_target(scheme: str, host: str, port: int | None) -> tuple[str, int]:
    """The host and port a URL parsed into ``scheme``, ``host`` and ``port`` (None: the scheme's
    own) reaches; ``OutboundBlocked`` unless it is an http(s) URL with a host."""
    if scheme not in ALLOWED_SCHEMES:
        raise OutboundBlocked(f"scheme {scheme or '(none)'!r} refused: only http and https")
    if not host:
        raise OutboundBlocked("URL has no host")
    return host, port or (443 if scheme == "https" else 80)


def taken_for_an_address(host: str) -> bool:
    """Whether a client may take ``host`` for an address and connect to it without asking the
    resolver (aiohttp does): digits and dots (``127.1``, ``2130706433``, ``127.0.0.1.`` too), or a
    colon. Such a host is checked before sending as the address it stands for."""
    return ":" in host or host.replace(".", "").isdigit()


def display(scheme: str, host: str, port: int | None, path: str) -> str:
    """A URL without credentials or query, for messages and logs."""
    shown_port = f":{port}" if port else ""
    shown_host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown_host}{shown_port}{path}"


# --- redirects ---------------------------------------------------------------------------------


class RedirectRule(TypedDict):
    follow_redirects: bool
    max_redirects: int


def redirect_rule(max_redirects: int) -> RedirectRule:
    """A client's redirect options: at most ``max_redirects`` hops, none when 0. Each hop is a new
    request, checked before it is sent like the first; a client that cannot check a hop before
    following it (aiohttp) follows none."""
    return {"follow_redirects": max_redirects > 0, "max_redirects": max_redirects}


# --- pinned resolution -------------------------------------------------------------------------


async def checked_targets(
    policy: OutboundPolicy, host: str, port: int, unresolved: type[Exception]
) -> list[str]:
    """Where a guarded connection to ``host`` goes, whatever the HTTP library: the name itself
    when the allow-list names it, else every address it resolves to, each checked (OutboundBlocked
    otherwise) so the socket connects to what was checked. A name that does not resolve raises the
    library's own ``unresolved`` connect error, which its client reports as a failed connection."""
    if policy.names(host, port):
        return [host]
    try:
        addresses = await resolve_async(host, port)
    except OutboundError as failure:
        raise unresolved(str(failure)) from failure
    policy.check_addresses(host, addresses, port)
    return [str(address) for address in addresses]


async def connect_first(
    targets: Sequence[str],
    connect: Callable[[str], Awaitable[StreamT]],
    failures: tuple[type[Exception], ...],
) -> StreamT:
    """The first of ``targets`` that ``connect`` reaches; the last failure when none does."""
    error: Exception | None = None
    for target in targets:
        try:
            return await connect(target)
        except failures as failure:
            error = failure
    assert error is not None
    raise error


class NetworkBackend(Protocol[StreamT_co]):
    """What httpcore's and httpcore2's connection pools call on their network backend."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> StreamT_co: ...

    async def sleep(self, seconds: float) -> None: ...


class PinnedBackend(Generic[StreamT]):
    """A connection pool's network backend (httpcore's interface, which httpcore2 shares) that
    resolves, checks, and connects to the checked addresses itself: no second resolution."""

    def __init__(
        self,
        policy: OutboundPolicy,
        inner: NetworkBackend[StreamT],
        unresolved: type[Exception],
        failures: tuple[type[Exception], ...],
    ) -> None:
        self.policy = policy
        self.inner = inner
        self.unresolved = unresolved
        self.failures = failures

    async def connect_tcp(self, host: str, port: int, **options: Any) -> StreamT:
        """``options``: the pool's timeout, local address and socket options, passed on."""
        targets = await checked_targets(self.policy, host, port, self.unresolved)
        return await connect_first(
            targets,
            lambda target: self.inner.connect_tcp(target, port, **options),
            self.failures,
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> NoReturn:
        raise OutboundBlocked("unix sockets are refused")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def pin_connections(pool: object, policy: OutboundPolicy, library: ModuleType) -> None:
    """Put a ``PinnedBackend`` under ``pool``, a connection pool of ``library`` (httpcore, or its
    fork httpcore2: the same names), which builds every connection with its ``_network_backend``;
    or refuse to make a client at all when the library no longer has that attribute: an unguarded
    client must never be made. A name that no longer resolves when connecting is the library's
    ConnectError, which its client reports as a failed connection."""
    if not isinstance(pool, library.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        raise RuntimeError(f"{library.__name__} changed: cannot guard outbound connections")
    inner = getattr(pool, "_network_backend")  # noqa: B009 (a private attribute, checked above)
    failures = (library.ConnectError, library.ConnectTimeout)
    pinned = PinnedBackend(policy, inner, library.ConnectError, failures)
    setattr(pool, "_network_backend", pinned)  # noqa: B010
