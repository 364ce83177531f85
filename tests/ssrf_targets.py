"""The SSRF target list: internal addresses in the spellings an attacker would try, shared by the
outbound guard's own tests (``tests/core/outbound/test_policy.py``) and every outbound path a tenant can
point at a URL (``tests/reliability/test_ssrf.py``).

Each target is a host as it goes in a URL (``[…]`` for IPv6), with the port left to the caller:
the paths aim every target at a loopback service of the test's, so a guard that let one through
would show as a request the service received. A name that does not resolve here (``unresolved``)
is refused as unresolvable; where it does resolve, it resolves to an internal address and is
refused as that."""

from __future__ import annotations

import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    host: str
    what: str
    unresolved: bool = False  # a name this machine may not resolve: "cannot resolve" is a refusal

    def url(self, port: int | None = None, path: str = "/") -> str:
        return f"http://{self.host}{f':{port}' if port else ''}{path}"


def _loopback_hostname() -> list[Target]:
    """This machine's own name, when it resolves to loopback (it does in most containers)."""
    name = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return []
    if addresses and all(a.startswith("127.") or a == "::1" for a in addresses):
        return [Target(name, "a host name resolving to loopback")]
    return []


INTERNAL: list[Target] = [
    # IPv4 loopback, as written by people and by inet_aton
    Target("127.0.0.1", "loopback"),
    Target("127.1", "loopback, short form"),
    Target("127.0.1", "loopback, three parts"),
    Target("127.1.2.3", "loopback network"),
    Target("127.255.255.254", "loopback network, its top"),
    Target("2130706433", "loopback, decimal"),
    Target("0x7f000001", "loopback, hexadecimal"),
    Target("0x7f.1", "loopback, hexadecimal short form"),
    Target("017700000001", "loopback, octal"),
    Target("0177.0.0.1", "loopback, octal parts"),
    Target("127.000.000.001", "loopback, zero-padded"),
    # unspecified: connects to this host on Linux
    Target("0.0.0.0", "unspecified"),
    Target("0", "unspecified, decimal"),
    Target("[::]", "IPv6 unspecified"),
    # IPv6 loopback and IPv4 inside IPv6
    Target("[::1]", "IPv6 loopback"),
    Target("[0:0:0:0:0:0:0:1]", "IPv6 loopback, long form"),
    Target("[::ffff:127.0.0.1]", "IPv4-mapped loopback"),
    Target("[::ffff:7f00:1]", "IPv4-mapped loopback, hexadecimal"),
    Target("[::127.0.0.1]", "IPv4-compatible loopback"),
    Target("[64:ff9b::7f00:1]", "NAT64 of loopback"),
    Target("[2002:7f00:1::]", "6to4 of loopback"),
    # cloud metadata
    Target("169.254.169.254", "metadata service"),
    Target("2852039166", "metadata service, decimal"),
    Target("0xa9fea9fe", "metadata service, hexadecimal"),
    Target("[::ffff:169.254.169.254]", "metadata service, IPv4-mapped"),
    Target("169.254.170.2", "container credentials service"),
    Target("[fd00:ec2::254]", "metadata service over IPv6"),
    # link-local, unique local, site-local
    Target("169.254.0.1", "link-local"),
    Target("[fe80::1]", "IPv6 link-local"),
    Target("[fe80::1%25eth0]", "IPv6 link-local with a zone"),
    Target("[fc00::1]", "unique local"),
    Target("[fdff:ffff::1]", "unique local, its top"),
    Target("[fec0::1]", "IPv6 site-local"),
    # private networks
    Target("10.0.0.1", "private 10/8"),
    Target("10.255.255.254", "private 10/8, its top"),
    Target("0xa.0.0.1", "private 10/8, hexadecimal"),
    Target("172.16.0.1", "private 172.16/12"),
    Target("172.31.255.254", "private 172.16/12, its top"),
    Target("192.168.0.1", "private 192.168/16"),
    Target("192.168.255.254", "private 192.168/16, its top"),
    Target("[::ffff:10.0.0.1]", "private, IPv4-mapped"),
    Target("[::ffff:c0a8:101]", "private, IPv4-mapped hexadecimal"),
    Target("100.64.0.1", "shared address space (CGNAT)"),
    Target("100.127.255.254", "shared address space, its top"),
    # other addresses that are not the internet
    Target("198.18.0.1", "benchmarking network"),
    Target("192.0.0.1", "IETF protocol assignments"),
    Target("224.0.0.1", "multicast"),
    Target("[ff02::1]", "IPv6 multicast"),
    Target("240.0.0.1", "reserved"),
    Target("255.255.255.255", "broadcast"),
    # names
    Target("localhost", "localhost"),
    Target("LOCALHOST", "localhost, upper case"),
    Target("localhost.", "localhost, trailing dot", unresolved=True),
    Target("127.0.0.1.", "loopback with a trailing dot, a name", unresolved=True),
    Target("api.localhost", "a subdomain of localhost", unresolved=True),
    Target("metadata.google.internal", "metadata service by name", unresolved=True),
    *_loopback_hostname(),
]
