"""One pooled HTTP client per upstream, shared by every profile that calls it.

A client per profile would split the pool (and its kept-alive connections) between
profiles on the same upstream; httpx's defaults (100 connections, 20 kept alive) would
silently queue the 101st concurrent stream and reopen a connection for most calls at
concurrency above 20. The pool is sized from the concurrent-turn limit instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from app.providers.transport import LeanTransport


class UpstreamClients:
    def __init__(self, *, max_connections: int, lean: bool = True) -> None:
        self._max = max_connections
        self._lean = lean
        self._clients: dict[tuple[str, float], httpx.AsyncClient] = {}

    def for_url(self, base_url: str, *, timeout: float) -> httpx.AsyncClient:
        """The shared client for `base_url`'s origin with this read timeout."""
        parts = urlsplit(base_url)
        key = (f"{parts.scheme}://{parts.netloc}", timeout)
        client = self._clients.get(key)
        if client is None:
            # The read timeout bounds the silence between chunks, not the whole reply;
            # connect failures should surface fast so the retry layer can act.
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
                limits=httpx.Limits(max_connections=self._max, max_keepalive_connections=self._max),
                # httpcore's h11-on-anyio path cost about 2 ms of CPU per streamed call
                # (benchmarks/hot_path_floors.py); this one keeps httpx and its semantics.
                transport=LeanTransport(max_connections=self._max) if self._lean else None,
            )
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
