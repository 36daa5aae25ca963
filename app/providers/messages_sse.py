"""The Messages API's Server-Sent Events, cut into (event name, JSON bytes) pairs.

Every event of that stream is an `event:` line and one `data:` line, so whole events are
cut out at blank lines and their data handed to orjson as the bytes that arrived: the
general decoder (app/providers/sse_decoder.py `SSEDecoder`) decodes every line to text
first and walks it line by line, which cost more per event than parsing its JSON. Any
other shape (CR line endings, comments, multi-line data, a stream that opens with a BOM
mid-buffer) goes through that general decoder, so nothing a lenient server sends is lost.
"""

from __future__ import annotations

from app.providers.sse_decoder import SSEDecoder

_BOM = "\ufeff".encode()

Event = tuple[str | None, bytes | str]
"""(event name or None, data): data as the bytes that arrived, or text from the general path."""


class MessagesEventDecoder:
    """Incremental: `feed` each body chunk as it arrives, `close` at the body's end."""

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False
        self._general: SSEDecoder | None = None
        """Set once a chunk has a shape the fast path does not read; used from then on."""
        self._blocks = SSEDecoder()
        """Reads, one whole block at a time, the odd block of an otherwise plain stream."""

    def feed(self, chunk: bytes) -> list[Event]:
        if self._general is not None:
            return [(sse.event, sse.data) for sse in self._general.feed(chunk)]
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer  # perhaps the first bytes of a BOM: wait for more
                return []
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        if b"\r" in buffer:
            # The buffer starts at an event boundary, so the general decoder takes over
            # from here exactly where this one stopped.
            self._buffer = b""
            self._general = SSEDecoder()
            return self.feed(buffer)
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[Event] = []
        for block in blocks:
            if block.startswith(b"event: "):
                cut = block.find(b"\n")
                one_data_line = (
                    block.startswith(b"data: ", cut + 1) and block.find(b"\n", cut + 1) < 0
                )
                if cut > 0 and one_data_line:
                    events.append((block[7:cut].decode("utf-8", "replace"), block[cut + 7 :]))
                    continue
            events += [(sse.event, sse.data) for sse in self._blocks.feed(block + b"\n\n")]
        return events

    def close(self) -> list[Event]:
        """Flush at end of stream; lenient servers omit the final blank line."""
        general = self._general or self._blocks
        events = general.feed(self._buffer) if self._buffer else []
        self._buffer = b""
        return [(sse.event, sse.data) for sse in events + general.close()]
