"""SSRF guard: which addresses a server-side fetch may reach, decided before connecting.

The agent chooses URLs, and the text it reads can choose them for it (a prompt injection on
any page), so a fetch tool is a way to make this server send requests from inside its own
network: to the cloud metadata service, to admin ports on loopback, to the private LAN.
Every address a host resolves to is checked here; the caller then connects to one of the
checked addresses itself, so a second DNS answer cannot swap in a forbidden one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task credentials
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
    )
)

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")

# What `inet_aton` accepts: one to four dot-separated parts, each decimal, octal (leading 0)
# or hex (0x). Matching the whole string first matters: glibc's inet_aton stops at the first
# space and ignores the rest, so "127.0.0.1 evil.example" would pass as 127.0.0.1.
_INET_ATON_FORM = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.I)


class SSRFError(Exception):
    """A fetch target was refused or could not be resolved; the message says which and why."""


class AddressRefused(SSRFError):
    pass


class ResolutionFailed(SSRFError):
    pass


def check_address(ip: str | IPAddress) -> str | None:
    """Why `ip` must not be fetched from (e.g. "loopback address"), or None when it may be.

    The named categories come first so the refusal says what the address is; the final
    `is_global` test catches the rest (documentation, benchmarking and protocol ranges), since
    a public fetch tool has no business with anything that is not globally routable.
    """
    if isinstance(ip, str):
        try:
            ip = ipaddress.ip_address(ip)
        except ValueError:
            return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        # A zone index only exists on link-scoped addresses; judge the address without it.
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    if ip in METADATA_ADDRESSES:
        return "cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            kind, v4 = embedded
            reason = check_address(v4)
            if reason is not None:
                return f"{kind} form of {v4}, {reason}"
            if kind in ("IPv4-compatible", "IPv4-translated"):
                # Deprecated forms no public host is reached by; connecting to one would
                # depend on local routing quirks, so there is nothing to allow.
                return f"deprecated {kind} IPv6 address"
            return None
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_loopback:
        return "loopback address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK:
        # "This network": never a remote host, and a connect to 0.0.0.0 reaches this one.
        return "this-network address (0.0.0.0/8)"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast:
        return "multicast address"
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _CGNAT:
            return "shared (CGNAT) address"
        if ip == ipaddress.IPv4Address("255.255.255.255"):
            return "broadcast address"
    else:
        if ip.is_site_local:
            return "site-local address"
        if ip in _NAT64_LOCAL:
            return "local-use NAT64 address"
    # Reserved before private: ipaddress counts 240.0.0.0/4 as private too, and "reserved"
    # is the reason an operator can act on.
    if ip.is_reserved:
        return "reserved address"
    if ip.is_private:
        return "private address"
    if not ip.is_global:
        return "non-global address"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address a v6 form carries, when the OS or a gateway would deliver to it."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _TRANSLATED:
        return "IPv4-translated", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    # :: and ::1 live in ::/96 too but are themselves (unspecified, loopback), not v4 forms.
    if ip in _COMPATIBLE and int(ip) > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def parse_ip_literal(host: str) -> IPAddress | None:
    """`host` as an address if it is an IP literal in any form a resolver would accept.

    Besides canonical v4 and (bracketed) v6 this takes the `inet_aton` spellings —
    `2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1` — because getaddrinfo turns them into
    addresses without DNS; a guard that only knew dotted quads would wave them through as
    hostnames.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _INET_ATON_FORM.fullmatch(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def normalise_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot: the form allow-list entries are compared in."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.rstrip(".")


DEFAULT_PORTS = frozenset({80, 443})
"""What an allow-list entry without a port allows: the web's ports, nothing else. Allowing a
name used to allow every port on it, including a control API a redirect could reach."""

Ports = frozenset[int] | None
"""Allowed ports of an entry; None means any (written `host:*`)."""


def split_port(entry: str) -> tuple[str, Ports]:
    """`host:8080` -> ("host", {8080}), `[::1]:*` -> ("::1", None), `host` -> default ports.

    A bare IPv6 literal has colons of its own, so a port needs brackets there. An entry
    with an unreadable port matches nothing (see AllowList.parse).
    """
    text = entry.strip()
    host, port = text, ""
    if text.startswith("["):
        close = text.find("]")
        if close != -1:
            host, rest = text[1:close], text[close + 1 :]
            port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not port:
        return host, DEFAULT_PORTS
    if port == "*":
        return host, None
    if port.isdigit() and 0 < int(port) < 65536:
        return host, frozenset({int(port)})
    return host, frozenset()


@dataclass(frozen=True, slots=True)
class AllowList:
    """Operator exceptions, in three kinds, each scoped to ports (`host:port`, `host:*`).

    A name allows that name whatever it resolves to. A bare address allows that literal
    destination only, not every name resolving to it: otherwise a DNS name anyone can point
    at the address (or `localhost`) would ride the exception. A CIDR allows any resolved
    address inside it, which is the explicit way to say "any name landing here". An entry
    without a port allows only ports 80 and 443.
    """

    names: tuple[tuple[str, Ports], ...]
    addresses: tuple[tuple[IPAddress, Ports], ...]
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Ports], ...]

    @classmethod
    def parse(cls, entries: Sequence[str]) -> AllowList:
        names: list[tuple[str, Ports]] = []
        addresses: list[tuple[IPAddress, Ports]] = []
        networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Ports]] = []
        for entry in entries:
            raw_host, ports = split_port(entry)
            text = normalise_host(raw_host)
            if not text:
                continue
            if "/" in text:
                # A malformed CIDR matches nothing: failing closed (refusing) is safe, while
                # guessing what the operator meant could open a wider range than intended.
                with contextlib.suppress(ValueError):
                    networks.append((ipaddress.ip_network(text, strict=False), ports))
                continue
            literal = parse_ip_literal(text)
            if literal is not None:
                addresses.append((_unwrap_mapped(literal), ports))
            else:
                names.append((text, ports))
        return cls(tuple(names), tuple(addresses), tuple(networks))

    def allows_name(self, name: str, port: int) -> bool:
        return any(n == name and _port_ok(ports, port) for n, ports in self.names)

    def allows_address(self, ip: IPAddress, port: int) -> bool:
        ip = _unwrap_mapped(ip)
        return any(a == ip and _port_ok(ports, port) for a, ports in self.addresses)

    def in_networks(self, ip: IPAddress, port: int) -> bool:
        ip = _unwrap_mapped(ip)
        return any(
            ip.version == net.version and ip in net and _port_ok(ports, port)
            for net, ports in self.networks
        )


def _port_ok(ports: Ports, port: int) -> bool:
    return ports is None or port in ports


def _unwrap_mapped(ip: IPAddress) -> IPAddress:
    # ::ffff:10.0.0.5 reaches 10.0.0.5, so it must match an entry written as 10.0.0.0/8.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


async def resolve_and_check(host: str, port: int, *, allow: Sequence[str]) -> list[str]:
    """The addresses `host` resolves to, every one of them allowed, or AddressRefused.

    One forbidden answer refuses the whole host rather than being skipped: a name that
    resolves to both a public and a private address is either misconfigured or a rebinding
    setup, and dropping the bad answer would still leave the attacker choosing the target.
    The caller must connect to one of the returned addresses, never re-resolve the name.
    """
    name = normalise_host(host)
    if not name:
        raise AddressRefused("the URL has no host")
    rules = AllowList.parse(allow)
    literal = parse_ip_literal(name)
    if literal is not None:
        if rules.allows_address(literal, port) or rules.in_networks(literal, port):
            return [str(literal)]
        reason = check_address(literal)
        if reason is not None:
            shown = name if name == str(literal) else f"{name} (= {literal})"
            raise AddressRefused(f"{shown} is a forbidden destination: {reason}")
        return [str(literal)]

    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"could not resolve {name}: {exc}") from None
    found: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    if not found:
        raise ResolutionFailed(f"{name} resolved to no addresses")
    if rules.allows_name(name, port):
        return found
    for address in found:
        ip = ipaddress.ip_address(address)
        if rules.in_networks(ip, port):
            continue
        reason = check_address(ip)
        if reason is not None:
            raise AddressRefused(f"{name} resolves to {address}: {reason}")
    return found
