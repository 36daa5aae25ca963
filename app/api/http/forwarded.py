"""Who the client is behind a reverse proxy you trust, and its share of the per-IP limit.

Behind nginx every connection comes from the proxy's address, so a per-peer count counts
the proxy: one greedy client exhausts the cap for everyone, or the cap must be switched off.
The client's address is in the header the proxy sets, but a header is only as honest as
whoever wrote it: believed from any peer, `X-Forwarded-For: 1.2.3.4` lets a client pick the
address it is counted as. So it is read only when the connection comes from an address in
`COURIER_TRUSTED_PROXIES`, and only the one header the operator names: nginx passes on a
`Forwarded` header it does not set exactly as the client wrote it.

uvicorn's own `proxy_headers` is off (app/cli.py): it trusts 127.0.0.1 by default and reads
`FORWARDED_ALLOW_IPS` from the environment at any time, a security switch Courier would not
have frozen, and it ran on every request (24-43 thousand instructions) even with no proxy.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Literal

from starlette.types import ASGIApp, Receive, Scope, Send

ProxyHeader = Literal["x-forwarded-for", "forwarded"]
Headers = Iterable[tuple[bytes, bytes]]
RETRY_AFTER_S = 1
"""A request in flight past the cap: others of the same client end within seconds."""
_MAX_NAME = 64
"""An entry that is not an address (`unknown`, an obfuscated `_token`) names its client up to
this many characters: it becomes a counter key, which must not be a megabyte long."""
_MAX_CACHED_PEERS = 4096


@dataclass(frozen=True)
class TrustedProxies:
    """The proxies whose header is believed, and which header that is."""

    networks: tuple[IPv4Network | IPv6Network, ...] = ()
    header: ProxyHeader = "x-forwarded-for"
    _seen: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    """Peer address -> trusted: a connection's peer is tested once, not per network."""

    def trusts(self, peer: str) -> bool:
        if not self.networks:
            return False
        known = self._seen.get(peer)
        if known is None:
            known = _in_any(_address(peer), self.networks)
            if len(self._seen) >= _MAX_CACHED_PEERS:
                self._seen.clear()  # peers are many only when they are untrusted clients
            self._seen[peer] = known
        return known

    def client_of(self, peer: str, headers: Headers) -> str:
        """The client a request comes from: `peer` unless `peer` is a trusted proxy, else the
        nearest untrusted address in the header, walking from the right (the entry the
        nearest proxy wrote) to the left (what the client wrote, which no one vouches for)."""
        if not self.trusts(peer):
            return peer
        name = self.header.encode()
        lines = [value for key, value in headers if key.lower() == name]
        if not lines:
            return peer
        entries = _entries(b",".join(lines).decode("latin-1"), forwarded=self.header == "forwarded")
        for entry in reversed(entries):
            if not self.trusts(entry):
                return entry
        return entries[0] if entries else peer


def _address(text: str) -> IPv4Address | IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _in_any(
    address: IPv4Address | IPv6Address | None, networks: Iterable[IPv4Network | IPv6Network]
) -> bool:
    if address is None:
        return False
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1 on a dual-stack socket
    return any(address in network for network in networks)


def _entries(value: str, *, forwarded: bool) -> list[str]:
    """The header's hops, nearest last, each as a normalised address or a bounded token."""
    hops: list[str] = []
    for element in value.split(","):
        raw = _for_value(element) if forwarded else element.strip()
        if raw is None:
            hops.append("unknown")  # a hop the proxy did not name is still a hop
        elif raw:
            hops.append(_host(raw))
    return hops


def _for_value(element: str) -> str | None:
    """The `for=` value of one RFC 7239 element (`for="[2001:db8::1]:4711";proto=https`)."""
    for pair in element.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key.strip().lower() == "for":
            return value.strip().strip('"')
    return None


def _host(item: str) -> str:
    """`1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]:80`, `2001:db8::1` -> the address, normalised;
    anything else (`unknown`, `_hidden`) -> itself, bounded."""
    host = item
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    address = _address(host)
    return str(address) if address is not None else item[:_MAX_NAME]


class ForwardedClients:
    """The outermost ASGI layer when trusted proxies are configured: it names the client of
    each request a trusted proxy forwards (`scope["client"]`) and caps each client's requests
    in flight at `max_per_ip`, the count the connection guard keeps for direct peers (a proxy
    multiplexes many clients over few kept-alive connections, so there a connection count
    would count the proxy). Past the cap it answers 429 itself without reading the body."""

    def __init__(self, app: ASGIApp, proxies: TrustedProxies, *, max_per_ip: int) -> None:
        self.app = app
        self.proxies = proxies
        self.max_per_ip = max_per_ip
        self.in_flight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        if scope["type"] != "http" or not peer or not self.proxies.trusts(peer[0]):
            await self.app(scope, receive, send)
            return
        client = self.proxies.client_of(peer[0], scope.get("headers") or ())
        if self.max_per_ip and self.in_flight[client] >= self.max_per_ip:
            await _refuse(send, self.max_per_ip)
            return
        self.in_flight[client] += 1
        try:
            # The port is the proxy's, not the client's: 0 says it is unknown.
            await self.app({**scope, "client": (client, 0)}, receive, send)
        finally:
            left = self.in_flight[client] - 1
            if left > 0:
                self.in_flight[client] = left
            else:
                del self.in_flight[client]


async def _refuse(send: Send, cap: int) -> None:
    body = json.dumps(
        {
            "error": {
                "message": f"this client already has {cap} requests in flight",
                "type": "rate_limit_error",
                "param": None,
                "code": "too_many_connections",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
