"""A lean Server-Sent Events response: one ASGI send per frame and nothing else per frame.

sse-starlette wraps every send in its own cancel scope (a per-send timeout), runs a task
group of three watchers per response and polls for shutdown; on a stream of 40 frames
that is a visible share of a turn's CPU. Here a response costs one watcher task (for
the client's disconnect) and a frame costs its encoding and one send. Keepalives are
the frame source's business (`app/api/chat/output.py`'s `sse_frames` writes comment frames),
so there is no ping task either.

The names and the frame encoding match sse-starlette's, so the bytes on the wire are the
same and the route only swaps an import.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterable, Mapping

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

SSE_SEP = "\r\n"
"""The line end of every frame Courier encodes (sse-starlette's default, so the bytes on
the wire stayed the same when this module replaced it)."""
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class ServerSentEvent:
    """One frame: optional comment, event name and data, each line prefixed per the spec."""

    __slots__ = ("comment", "data", "event", "sep")

    def __init__(
        self,
        data: str | None = None,
        *,
        event: str | None = None,
        comment: str | None = None,
        sep: str = SSE_SEP,
    ) -> None:
        self.data = data
        self.event = event
        self.comment = comment
        self.sep = sep

    def encode(self) -> bytes:
        sep = self.sep
        data = self.data
        plain = data is not None and "\n" not in data and "\r" not in data
        if plain and self.comment is None and self.event is None:
            return f"data: {data}{sep}{sep}".encode()  # the common frame
        out: list[str] = []
        if self.comment is not None:
            out += [f": {line}{sep}" for line in _LINE_BREAK.split(self.comment)]
        if self.event is not None:
            out.append("event: " + _LINE_BREAK.sub("", self.event) + sep)
        if self.data is not None:
            out += [f"data: {line}{sep}" for line in _LINE_BREAK.split(self.data)]
        out.append(sep)
        return "".join(out).encode()


class FinalFrame(bytes):
    """A frame source's last bytes: they go out with the response's end in one write (a
    separate write for the terminating chunk cost a socket send per response)."""

    __slots__ = ()


class EventSourceResponse(StreamingResponse):
    """Streams `content` (frames, or already-encoded bytes) as `text/event-stream`.

    When the client disconnects, the stream is cancelled at once (not at its next send),
    so a turn waiting on a slow tool learns within a moment that nobody is listening.
    """

    def __init__(
        self,
        content: AsyncIterable[ServerSentEvent | bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        ping: float = 0,
        sep: str = "\r\n",
    ) -> None:
        if ping:
            raise ValueError("no ping task here: the frame source writes its own keepalives")
        merged = {"Cache-Control": "no-store", **(headers or {})}
        merged["Connection"] = "keep-alive"
        merged["X-Accel-Buffering"] = "no"
        # Starlette's iterator slot is typed for bytes and str; the frames live beside it.
        super().__init__(
            (), status_code=status_code, headers=merged, media_type="text/event-stream"
        )
        self.frames = content
        self.sep = sep

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch_disconnect() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        watcher = asyncio.create_task(watch_disconnect())
        try:
            try:
                await self._send_frames(send)
            finally:
                watcher.cancel()
                aclose = getattr(self.frames, "aclose", None)
                if aclose is not None:
                    await aclose()  # runs the source's cleanup (it abandons the turn)
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # our own cancellation: the client left, end quietly
        except OSError:
            pass  # the socket closed under a send: the same departure, seen from the write
        if self.background is not None:
            await self.background()

    async def _send_frames(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for frame in self.frames:
            if type(frame) is FinalFrame:
                await send({"type": "http.response.body", "body": frame, "more_body": False})
                return
            body = frame.encode() if isinstance(frame, ServerSentEvent) else frame
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
