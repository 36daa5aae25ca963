"""One pooled HTTP client per upstream, shared by every profile that calls it.

A client per profile would split the pool (and its kept-alive connections) between
profiles on the same upstream; httpx's defaults (100 connections, 20 kept alive) would
silently queue the 101st concurrent stream and reopen a connection for most calls at
concurrency above 20. The pool is sized from the concurrent-turn limit instead.

The anthropic SDK is built on httpx2, a fork of httpx, and only accepts its client, so
an upstream called on that wire gets an httpx2 client over the same kind of pool.
"""

from __future__ import annotations

from urllib.parse import urlsplit
from urllib.request import getproxies_environment

import httpx
import httpx2

from app.providers.base import CONNECT_TIMEOUT_S
from app.providers.sdk_transport import LeanSDKTransport
from app.providers.transport import LeanTransport


class UpstreamClients:
    def __init__(self, *, max_connections: int, lean: bool = True) -> None:
        self._max = max_connections
        self._lean = lean
        self._clients: dict[tuple[str, float], httpx.AsyncClient] = {}
        self._sdk_clients: dict[tuple[str, float], httpx2.AsyncClient] = {}

    def for_url(self, base_url: str, *, timeout: float) -> httpx.AsyncClient:
        """The shared client for `base_url`'s origin with this read timeout."""
        parts = urlsplit(base_url)
        key = (f"{parts.scheme}://{parts.netloc}", timeout)
        client = self._clients.get(key)
        if client is None:
            lean = self._lean and not _env_proxy_for(parts.scheme)
            # The read timeout bounds the silence between chunks, not the whole reply;
            # connect failures should surface fast so the retry layer can act.
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
                limits=httpx.Limits(max_connections=self._max, max_keepalive_connections=self._max),
                # httpcore's h11-on-anyio path cost about 2 ms of CPU per streamed call
                # (benchmarks/hot_path_floors.py); this one keeps httpx and its semantics.
                transport=LeanTransport(max_connections=self._max) if lean else None,
            )
            self._clients[key] = client
        return client

    def sdk_client_for_url(self, base_url: str, *, timeout: float) -> httpx2.AsyncClient:
        """The shared httpx2 client for `base_url`'s origin, for an SDK built on httpx2."""
        parts = urlsplit(base_url)
        key = (f"{parts.scheme}://{parts.netloc}", timeout)
        client = self._sdk_clients.get(key)
        if client is None:
            lean = self._lean and not _env_proxy_for(parts.scheme)
            client = httpx2.AsyncClient(
                # A default only: the SDK sends each request with the timeout it was given.
                timeout=httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
                limits=httpx2.Limits(
                    max_connections=self._max, max_keepalive_connections=self._max
                ),
                # As the SDK's own client does; a redirect is followed, not reported.
                follow_redirects=True,
                transport=LeanSDKTransport(LeanTransport(max_connections=self._max))
                if lean
                else None,
            )
            self._sdk_clients[key] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        for sdk_client in self._sdk_clients.values():
            await sdk_client.aclose()
        self._sdk_clients.clear()


def _env_proxy_for(scheme: str) -> bool:
    """The environment names a proxy for this scheme (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY).

    httpx reads those only for a client without a transport of its own: given the lean
    one, a deployment behind a proxy would have called the upstream directly. Such a
    client gets httpx's transport instead, which applies the proxy and NO_PROXY as httpx
    documents them."""
    proxies = getproxies_environment()
    return bool(proxies.get(scheme) or proxies.get("all"))
