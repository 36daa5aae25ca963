"""Server-Sent Events decoded incrementally from whatever byte chunks the network delivers.

Shared by both wires: the OpenAI chat stream reads every event through it, and the
Messages API's fast path (`messages_sse.py`) hands it any shape it does not cut itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str | None = None


_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff".encode()


class SSEDecoder:
    """Incremental Server-Sent Events parser over arbitrary byte chunks.

    Lines may end in LF, CRLF or a bare CR, and a chunk boundary may split a line, a UTF-8
    sequence or a CRLF pair; bytes are only decoded once a whole line is in hand.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event: str | None = None
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return [
            SSEEvent(e.decode("utf-8", errors="replace")) if isinstance(e, bytes) else e
            for e in self.feed_data(chunk)
        ]

    def feed_data(self, chunk: bytes) -> list[bytes | SSEEvent]:
        """`feed`, with a plain event (no name, one `data:` line) as its data's bytes: the
        caller hands them to orjson as they arrived, no text or event object made."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started and len(buffer) >= len(_BOM):
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        if b"\r" in buffer or not self._started or self._data or self._event is not None:
            self._buffer = buffer
            return list(self._feed_lines())
        # The shape nearly every server sends: LF endings and one `data:` line per event.
        # Whole events are cut out at blank lines and only the rare other shapes go line
        # by line; per line, the general path cost more than parsing the chunk's JSON.
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[bytes | SSEEvent] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(block[6:])
                continue
            for line in block.split(b"\n"):
                self._line(line.decode("utf-8", errors="replace"))
            if (event := self._line("")) is not None:
                events.append(event)
        return events

    def _feed_lines(self) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        position = 0
        while match := _LINE_END.search(self._buffer, position):
            # A trailing CR may be the first half of a CRLF split across chunks; wait for it.
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break
            line = self._buffer[position : match.start()]
            position = match.end()
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        self._buffer = self._buffer[position:]
        return events

    def close(self) -> list[SSEEvent]:
        """Flush at end of stream; lenient servers omit the final blank line."""
        events = self._feed_lines()
        tail = self._buffer.rstrip(b"\r")
        self._buffer = b""
        for line in (tail.decode("utf-8", errors="replace"), "") if tail else ("",):
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not self._started:
            self._started = True
            line = line.removeprefix("\ufeff")
        if not line:
            if not self._data:
                self._event = None
                return None
            event = SSEEvent(data="\n".join(self._data), event=self._event)
            self._data, self._event = [], None
            return event
        if line.startswith(":"):
            return None  # comment / keepalive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None
