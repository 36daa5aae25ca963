"""Drop slow and greedy HTTP clients: header and body read deadlines, a per-IP cap, bounded heads.

uvicorn has a keep-alive timeout for idle connections but no deadline on reading a request:
1,200 half-sent request heads and 200 trickling bodies stayed open indefinitely (descriptors
11 -> 1,210), and any byte received cancels its keep-alive timer. This subclass of its httptools
protocol adds the deadlines a reverse proxy would (nginx's client_header_timeout and
client_body_timeout) and refuses a peer's connections past a cap, so one client cannot
exhaust the process's descriptors (a trusted proxy's are not counted: its clients' requests
are, in app/api/http/forwarded.py). Past a deadline the connection is simply closed: the
client was not sending a request we could answer.

The parser has no bound on a request's head either: four 32 MB header blocks were answered
200 and the process grew by 175 MB, 200,000 header fields were accepted, and httptools
joins a long header value piece by piece (`bytes +=`), so its cost grew with the square of
the value. The head is counted as it arrives, in bytes and in fields; past either bound the
client gets 431 (Request Header Fields Too Large) and the connection ends. Bytes are counted
before the parser has joined them into anything: a head still incomplete after a chunk was
wholly head, so at most one read's worth (uvloop reads 256 KiB) past the bound is parsed.
The fields, and the exact size of a head that completes within one read, are counted when
the head is complete, before the request goes any further.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api.http.forwarded import TrustedProxies

LINGER_S = 2.0
"""After a 431, how long the rest of the refused head is read and dropped: closing with
unread data makes the kernel send a reset, which can destroy the 431 before the client
reads it (as nginx's lingering_close)."""
_FIELD_OVERHEAD = 4
"""`: ` and CRLF around each field, for the callbacks' count of the head's bytes."""


def _too_large_response(limits: ConnectionLimits) -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": f"the request's header block is over {limits.max_header_bytes} bytes "
                f"or {limits.max_header_fields} fields",
                "type": "invalid_request_error",
                "param": None,
                "code": "request_header_fields_too_large",
            }
        }
    ).encode()
    head = (
        b"content-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    )
    return STATUS_LINE[431] + head + body


class _HeadTooLarge(Exception):
    """Raised in the parser's callback: the parser stops, and uvicorn asks for a 400 (a 431
    here)."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    """From the first byte of a request (or the connection opening) to its complete head."""
    body_timeout_s: float = 60.0
    """From the complete head to the last byte of the body."""
    max_per_ip: int = 256
    """Open connections one peer address may hold; 0 = no cap."""
    trusted: TrustedProxies = field(default_factory=TrustedProxies)
    """Proxies whose connections are not counted here: they carry many clients each, whose
    requests app/api/http/forwarded.py counts instead."""
    max_header_bytes: int = 64 * 1024
    """A request line and header block past this many bytes is answered 431."""
    max_header_fields: int = 100
    """A request with more header fields than this is answered 431."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines, the per-IP cap and the bounded head.
    Each server gets a subclass of its own from `guarded_httptools_protocol`, holding its
    limits and its count of open connections per peer."""

    limits: ClassVar[ConnectionLimits]
    open_by_ip: ClassVar[Counter[str]]
    too_large: ClassVar[bytes]
    """The 431 answer, encoded once."""
    _deadline: asyncio.TimerHandle | None = None
    _phase = "head"
    _peer: str | None = None
    _head_bytes = 0
    """Bytes of reads that ended inside the current request's head."""
    _reading = 0
    """The size of the read being parsed."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else None
        if peer is not None and not self.limits.trusted.trusts(peer):
            self.open_by_ip[peer] += 1
            self._peer = peer
            if self.limits.max_per_ip and self.open_by_ip[peer] > self.limits.max_per_ip:
                transport.abort()
                return
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._peer is not None:
            self.open_by_ip[self._peer] -= 1
            if self.open_by_ip[self._peer] <= 0:
                del self.open_by_ip[self._peer]
            self._peer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == "refused":
            return  # the rest of a refused head: read, never parsed
        if self._phase == "idle":
            self._phase = "head"
            self._arm(self.limits.header_timeout_s)
        heading = self._phase == "head"
        self._reading = len(data)
        super().data_received(data)
        if heading and self._phase == "head":
            # The head is still not complete, so this whole read belonged to it.
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0

    def _head_size(self) -> int:
        if self._head_bytes + self._reading <= self.limits.max_header_bytes:
            return 0  # everything received so far fits: no need to add it up
        return len(self.url) + sum(len(n) + len(v) + _FIELD_OVERHEAD for n, v in self.headers)

    def send_400_response(self, msg: str) -> None:
        if self._phase == "refused":  # our callback stopped the parser
            self._refuse_head()
            return
        super().send_400_response(msg)

    def _refuse_head(self) -> None:
        self._phase = "refused"
        self.transport.write(self.too_large)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._arm(LINGER_S)

    def on_headers_complete(self) -> None:
        # Counted once per request, not per field (a callback per header cost every
        # request more than the whole check); one read's worth at most got this far.
        if len(self.headers) > self.limits.max_header_fields or self._head_size() > (
            self.limits.max_header_bytes
        ):
            self._phase = "refused"
            raise _HeadTooLarge
        super().on_headers_complete()
        self._phase = "body"
        self._arm(self.limits.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = "served"
        self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._phase == "served":
            self._phase = "idle"  # uvicorn's keep-alive timer owns idle time

    def _arm(self, delay: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.abort()


def guarded_httptools_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The same deadlines and per-IP cap on uvicorn's httptools protocol, the fast parser
    the hot path runs on (about 2.4 ms less CPU per request than h11)."""
    guarded = {"limits": limits, "open_by_ip": Counter(), "too_large": _too_large_response(limits)}
    return cast(
        type[HttpToolsProtocol],
        type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), guarded),
    )
