"""The lean upstream transport over TLS: a certificate made with `openssl` for a loopback
server is verified, and the connection reused (the plain-socket cases are in tests/unit/)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

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


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_verifies_the_certificate_and_reuses_the_connection(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with upstream(answer(CHUNKED), tls=server_tls) as up:
        url = f"https://127.0.0.1:{up.port}/v1/chat"
        transport = LeanTransport(max_connections=2, verify=trusted)
        async with httpx.AsyncClient(transport=transport) as http:
            for _ in range(2):
                resp = await http.post(url, content=b"{}")
                assert resp.text == 'data: {"a":1}\n\ndata: {"b":2}\n\n'
        assert up.connections == 1
        # The same server with the system's trust store: a self-signed certificate fails.
        async with client() as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(url, content=b"{}")
