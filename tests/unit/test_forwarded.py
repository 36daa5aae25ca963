"""The client behind a trusted proxy (app/api/http/forwarded.py), in-process: the header
parser and the ASGI layer that counts each forwarded client's requests in flight."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any

import pytest

from app.api.http.forwarded import ForwardedClients, TrustedProxies
from app.config import ConfigError, load_settings

GOOD_KEY = "test-key-0123456789abcdef"
PROXY = "10.0.0.5"
NGINX = TrustedProxies((ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("::1/128")))
RFC7239 = TrustedProxies(NGINX.networks, "forwarded")


def xff(*values: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-forwarded-for", v.encode()) for v in values]


def fwd(*values: str) -> list[tuple[bytes, bytes]]:
    return [(b"forwarded", v.encode()) for v in values]


@pytest.mark.parametrize(
    ("proxies", "peer", "headers", "client"),
    [
        # An untrusted peer is the client, whatever it writes.
        (NGINX, "192.0.2.7", xff("1.2.3.4"), "192.0.2.7"),
        (NGINX, "192.0.2.7", fwd("for=1.2.3.4"), "192.0.2.7"),
        (TrustedProxies(), "10.0.0.5", xff("1.2.3.4"), "10.0.0.5"),
        # A trusted peer: the rightmost untrusted hop; a spoof on the left is passed over.
        (NGINX, PROXY, xff("203.0.113.9"), "203.0.113.9"),
        (NGINX, PROXY, xff("1.2.3.4, 203.0.113.9"), "203.0.113.9"),
        (NGINX, PROXY, xff("1.2.3.4, 203.0.113.9, 10.0.0.7"), "203.0.113.9"),
        (NGINX, PROXY, xff("1.2.3.4", "203.0.113.9"), "203.0.113.9"),  # two header lines
        (NGINX, PROXY, xff("203.0.113.9:51234"), "203.0.113.9"),
        (NGINX, PROXY, xff("[2001:db8::1]:443"), "2001:db8::1"),
        (NGINX, PROXY, xff("2001:DB8:0::1"), "2001:db8::1"),
        (NGINX, PROXY, xff("unknown"), "unknown"),
        (NGINX, PROXY, xff("x" * 500), "x" * 64),
        # Every hop trusted: the leftmost; nothing usable: the peer.
        (NGINX, PROXY, xff("10.0.0.9, 10.0.0.8"), "10.0.0.9"),
        (NGINX, PROXY, xff(""), PROXY),
        (NGINX, PROXY, [], PROXY),
        (NGINX, "::1", xff("203.0.113.9"), "203.0.113.9"),
        (NGINX, "::ffff:10.0.0.5", xff("203.0.113.9"), "203.0.113.9"),
        # The header not configured is ignored even when present.
        (NGINX, PROXY, fwd("for=1.2.3.4"), PROXY),
        (RFC7239, PROXY, xff("1.2.3.4"), PROXY),
        # RFC 7239: quoted values, brackets, ports, tokens, several pairs and lines.
        (RFC7239, PROXY, fwd("for=203.0.113.9;proto=https"), "203.0.113.9"),
        (RFC7239, PROXY, fwd('for="[2001:db8::1]:4711"'), "2001:db8::1"),
        (RFC7239, PROXY, fwd("For=1.2.3.4, for=203.0.113.9"), "203.0.113.9"),
        (RFC7239, PROXY, fwd("for=1.2.3.4", "for=203.0.113.9;by=10.0.0.5"), "203.0.113.9"),
        (RFC7239, PROXY, fwd("for=_hidden"), "_hidden"),
        (RFC7239, PROXY, fwd("for=1.2.3.4, proto=https"), "unknown"),
    ],
)
def test_the_client_of_a_request(
    proxies: TrustedProxies, peer: str, headers: list[tuple[bytes, bytes]], client: str
) -> None:
    assert proxies.client_of(peer, headers) == client


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("10.0.0.1/24", "host bits set"),
        ("nginx", "not an IP address"),
        ("0.0.0.0/0", "trusts every address"),
        ("::/0", "trusts every address"),
        ('["127.0.0.1", "proxy.local"]', "not an IP address"),
    ],
)
def test_a_bad_trusted_proxy_refuses_the_start(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_settings(api_key=GOOD_KEY, trusted_proxies=raw)


def test_trusted_proxies_parse_from_the_environment_forms() -> None:
    listed = load_settings(api_key=GOOD_KEY, trusted_proxies="127.0.0.1, ::1,172.30.86.0/24")
    as_json = load_settings(api_key=GOOD_KEY, trusted_proxies='["127.0.0.1","::1"]')
    assert [str(n) for n in listed.trusted_proxies] == ["127.0.0.1/32", "::1/128", "172.30.86.0/24"]
    assert as_json.trusted_proxies == listed.trusted_proxies[:2]
    assert load_settings(api_key=GOOD_KEY).trusted_proxies == ()


class Held:
    """An inner app whose requests stay in flight until released, recording their client."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.clients: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.clients.append(scope["client"])
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _request(app: ForwardedClients, peer: str, forwarded_for: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        raise AssertionError("the layer never reads the body")

    scope = {"type": "http", "client": (peer, 40000), "headers": xff(forwarded_for)}
    await app(scope, receive, send)
    return sent


def test_each_forwarded_client_has_its_own_cap() -> None:
    async def scenario() -> None:
        inner = Held()
        app = ForwardedClients(inner, NGINX, max_per_ip=2)
        a = [asyncio.create_task(_request(app, PROXY, "203.0.113.1")) for _ in range(2)]
        await asyncio.sleep(0)
        refused = await _request(app, PROXY, "9.9.9.9, 203.0.113.1")  # a spoof changes nothing
        other = asyncio.create_task(_request(app, PROXY, "203.0.113.2"))
        direct = asyncio.create_task(_request(app, "192.0.2.1", "203.0.113.1"))
        await asyncio.sleep(0)
        assert refused[0]["status"] == 429
        headers = dict(refused[0]["headers"])
        assert headers[b"retry-after"] == b"1"
        error = json.loads(refused[1]["body"])["error"]
        assert error["code"] == "too_many_connections" and error["type"] == "rate_limit_error"
        assert app.in_flight == {"203.0.113.1": 2, "203.0.113.2": 1}
        inner.release.set()
        for done in await asyncio.gather(*a, other, direct):
            assert done[0]["status"] == 200
        assert app.in_flight == {}
        # The forwarded client replaces the proxy; an untrusted peer stays itself.
        assert sorted(inner.clients) == [
            ("192.0.2.1", 40000),
            ("203.0.113.1", 0),
            ("203.0.113.1", 0),
            ("203.0.113.2", 0),
        ]
        again = await _request(app, PROXY, "203.0.113.1")
        assert again[0]["status"] == 200

    asyncio.run(scenario())


def test_a_cancelled_request_gives_its_place_back() -> None:
    async def scenario() -> None:
        app = ForwardedClients(Held(), NGINX, max_per_ip=1)
        task = asyncio.create_task(_request(app, PROXY, "203.0.113.1"))
        await asyncio.sleep(0)
        assert app.in_flight == {"203.0.113.1": 1}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert app.in_flight == {}

    asyncio.run(scenario())
