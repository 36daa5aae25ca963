"""A webhook receiver on 127.0.0.1 for the tests: answers each POST with the next status of
its script (200 once the script is used up) and records every request's headers and body,
so a test can verify signatures with the reference libraries and count attempts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.ops import ports


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    port: int = 0
    first_answer: threading.Event = field(default_factory=threading.Event)
    """Set: the first request is answered at once (the default). Cleared by `hold_first`."""

    def __post_init__(self) -> None:
        self.first_answer.set()

    def hold_first(self) -> None:
        """Keep the first request unanswered until `first_answer` is set: the sender is
        mid-attempt for as long as the test likes."""
        self.first_answer.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def answer(self, *statuses: int) -> None:
        """The statuses of the next requests, in order (then 200)."""
        self.statuses[:] = list(statuses)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver.received.append(Received(headers, body))
            if len(receiver.received) == 1:
                receiver.first_answer.wait(60)  # held while the test crashes the sender
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the test reads what it needs from `received`

    return Handler


@contextmanager
def receiving() -> Iterator[Receiver]:
    found = Receiver(port=ports.free_port())  # not a bare port 0: see app/ops/ports.py
    server = ThreadingHTTPServer(("127.0.0.1", found.port), _handler(found))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.first_answer.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as found:
        yield found
