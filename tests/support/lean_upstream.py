"""A loopback upstream for the lean transport's tests, in both tiers: a small asyncio server
on 127.0.0.1 that answers each request with exact bytes and counts its connections
(tests/unit/test_lean_transport.py over plain sockets, tests/e2e/test_lean_transport.py
over TLS with an `openssl` certificate)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx

from app.providers.transport import LeanTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]
"""Answers one request (its head and body already read); False closes the connection."""


class Upstream:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if not await self.handler(reader, writer, body):
                    return
        except asyncio.CancelledError:
            return  # the test is over and the server closing; nothing to report
        finally:
            writer.close()


@asynccontextmanager
async def upstream(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[Upstream]:
    up = Upstream(handler)
    server = await asyncio.start_server(up._serve, "127.0.0.1", 0, ssl=tls)
    up.port = server.sockets[0].getsockname()[1]
    try:
        yield up
    finally:
        server.close()


def answer(raw: bytes, *, keep: bool = True) -> Handler:
    async def handle(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> bool:
        writer.write(raw)
        await writer.drain()
        return keep

    return handle


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b'f\r\ndata: {"a":1}\n\n\r\n'
    b'f\r\ndata: {"b":2}\n\n\r\n'
    b"0\r\n\r\n"
)


def client(max_connections: int = 4, **kwargs: float) -> httpx.AsyncClient:
    timeout = httpx.Timeout(kwargs.get("read", 10.0), pool=kwargs.get("pool", 10.0))
    return httpx.AsyncClient(
        transport=LeanTransport(max_connections=max_connections), timeout=timeout
    )
