"""Bounded request heads (issue 28): too many header bytes or fields is 431, memory stays flat.

Against the real server (uvicorn with the guarded httptools protocol), over raw sockets: an
HTTP client library would refuse to send such heads at all.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server, ServerFactory

MIB = 1024 * 1024
RSS_GROWTH_BOUND = 24 * MIB
"""Generous: four 32 MB heads grew the unguarded server by 175 MB."""


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> Server:
    return module_servers()


def exchange(port: int, chunks: Iterable[bytes]) -> bytes:
    """Send the chunks (stopping if the server hangs up) and return all it answered; a
    reader runs meanwhile, so an answer sent mid-upload is kept whatever the upload does."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    received: list[bytes] = []

    def read() -> None:
        try:
            while part := sock.recv(65536):
                received.append(part)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for chunk in chunks:
            sock.sendall(chunk)
    except OSError:
        pass  # the server stopped reading a refused head: expected
    reader.join(30)
    sock.close()
    return b"".join(received)


def head(*fields: bytes) -> bytes:
    lines = [b"GET /health HTTP/1.1", b"Host: 127.0.0.1", *fields]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def huge_value(size: int) -> Iterator[bytes]:
    yield b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
    piece = b"a" * MIB
    for _ in range(size // MIB):
        yield piece
    yield b"\r\n\r\n"


def many_fields(count: int) -> Iterator[bytes]:
    yield b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    batch = b"X-a: b\r\n" * 10_000
    for _ in range(count // 10_000):
        yield batch
    yield b"\r\n"


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def rss(server: Server) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_heads_within_the_bounds_are_served(server: Server) -> None:
    fields = [b"X-F%d: v" % i for i in range(98)]  # with Host and one more: 100 fields
    fields.append(b"X-Pad: " + b"p" * (60 * 1024))
    assert status_of(exchange(server.port, [head(*fields)])) == 200


def test_one_field_too_many_is_431(server: Server) -> None:
    fields = [b"X-F%d: v" % i for i in range(100)]
    answer = exchange(server.port, [head(*fields)])
    assert status_of(answer) == 431
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_header_fields_too_large"


def test_a_head_over_64_kib_is_431_in_one_read_or_many(server: Server) -> None:
    big = head(b"X-Pad: " + b"p" * (65 * 1024))
    assert status_of(exchange(server.port, [big])) == 431
    assert status_of(exchange(server.port, [big[i : i + 1000] for i in range(0, len(big), 1000)]))


def test_huge_heads_get_431_and_the_server_stays_flat(server: Server) -> None:
    httpx.get(f"{server.base_url}/health")  # warm: the first request's allocations
    before = rss(server)
    for _ in range(4):
        assert status_of(exchange(server.port, huge_value(32 * MIB))) == 431
    assert status_of(exchange(server.port, many_fields(200_000))) == 431
    grown = rss(server) - before
    assert grown < RSS_GROWTH_BOUND, f"RSS grew by {grown / MIB:.1f} MiB"
    assert httpx.get(f"{server.base_url}/health").status_code == 200


def test_the_bounds_are_settings(servers: ServerFactory) -> None:
    srv = servers(COURIER_MAX_HEADER_FIELDS="20")
    assert status_of(exchange(srv.port, [head(*[b"X-%d: v" % i for i in range(19)])])) == 200
    assert status_of(exchange(srv.port, [head(*[b"X-%d: v" % i for i in range(20)])])) == 431
