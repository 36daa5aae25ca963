"""One Server-Sent Events response and one keepalive loop, for every stream Courier writes.

Chat chunks, Responses events and the `/v1/sessions/{id}/events` replay are the same
stream underneath: a turn's events, read from its handle, written as frames, with a
comment line whenever the client has heard nothing for a while (proxies and SDKs drop a
silent connection). So the loop is written once (`turn_stream`) and each endpoint only
says what one event looks like on its wire (`TurnFrames`).

The response is lean on purpose. sse-starlette, which two of those streams used before,
wraps every send in its own cancel scope (a per-send timeout), runs a task group of
three watchers per response and polls for shutdown; on a stream of 40 frames that was a
visible share of a turn's CPU. Here a response costs one watcher task (for the client's
disconnect) and a write costs its encoding and one send. Frames encode exactly as
sse-starlette's did (`\\r\\n` line ends, the same field order), so no client saw a change.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import NamedTuple, Protocol, cast

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.agent.events import TurnEvent, TurnFinished
from app.agent.turns.handle import TurnHandle
from app.api.http.errors import ApiError

SSE_SEP = "\r\n"
"""The line end of every frame Courier encodes (sse-starlette's default, so the bytes on
the wire stayed the same when this module replaced it)."""
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class ServerSentEvent:
    """One frame: optional comment, id, event name and data, each line prefixed per the
    spec, in sse-starlette's order."""

    __slots__ = ("comment", "data", "event", "id")

    def __init__(
        self,
        data: str | None = None,
        *,
        event: str | None = None,
        id: str | None = None,
        comment: str | None = None,
    ) -> None:
        self.data = data
        self.event = event
        self.id = id
        self.comment = comment

    def encode(self) -> bytes:
        sep = SSE_SEP
        data = self.data
        plain = data is not None and "\n" not in data and "\r" not in data
        if plain and self.comment is None and self.event is None and self.id is None:
            return f"data: {data}{sep}{sep}".encode()  # the common frame
        out: list[str] = []
        if self.comment is not None:
            out += [f": {line}{sep}" for line in _LINE_BREAK.split(self.comment)]
        if self.id is not None:
            out.append("id: " + _LINE_BREAK.sub("", self.id) + sep)
        if self.event is not None:
            out.append("event: " + _LINE_BREAK.sub("", self.event) + sep)
        if data is not None:
            out += [f"data: {line}{sep}" for line in _LINE_BREAK.split(data)]
        out.append(sep)
        return "".join(out).encode()


KEEPALIVE = ServerSentEvent(comment="keepalive").encode()


class EventPosition(NamedTuple):
    """Where a client stopped reading, from its `Last-Event-ID`: after the `seq`-th event,
    or inside it, after that event's first `part` frames (`id: seq.part`)."""

    seq: int
    part: int = 0


# ASCII digits only (`\d` would take "²" or Arabic-Indic digits), within a 64-bit integer.
_POSITION = re.compile(r"([0-9]{1,18})(?:\.([0-9]{1,18}))?")


def last_event_id(headers: Mapping[str, str]) -> EventPosition | None:
    """The `Last-Event-ID` a reconnecting client sends (`N` or `N.k`, as Courier numbers
    its frames), None when absent or empty (an EventSource sends "" for none received).
    Anything else is refused: guessing a position could repeat or skip frames the client
    relies on."""
    raw = headers.get("last-event-id")
    if not raw:
        return None
    found = _POSITION.fullmatch(raw)
    if found is None:
        raise ApiError(
            400,
            "Last-Event-ID must be an event id this server sent (N or N.k)",
            param="Last-Event-ID",
            code="invalid_last_event_id",
        )
    return EventPosition(int(found[1]), int(found[2] or 0))


class FinalFrame(bytes):
    """A frame source's last bytes: they go out with the response's end in one write (a
    separate write for the terminating chunk cost a socket send per response)."""

    __slots__ = ()


class EventSourceResponse(StreamingResponse):
    """Streams `content` (already-encoded frames) as `text/event-stream`.

    When the client disconnects, the stream is cancelled at once (not at its next send),
    so a turn waiting on a slow tool learns within a moment that nobody is listening.
    """

    def __init__(
        self,
        content: AsyncIterable[bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # `no-cache` and `X-Accel-Buffering: no`: a proxy must neither keep nor hold back
        # a stream (nginx buffers a response whole unless told not to).
        merged = {"Cache-Control": "no-cache", **(headers or {})}
        merged["Connection"] = "keep-alive"
        merged["X-Accel-Buffering"] = "no"
        # Starlette's iterator slot is typed for bytes and str; the frames live beside it.
        super().__init__(
            (), status_code=status_code, headers=merged, media_type="text/event-stream"
        )
        self.frames = content

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
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def opted_in(headers: Mapping[str, str]) -> set[str]:
    """The progress events a client asked to see on its stream (`X-Courier-Events:
    tools,approvals`); a client that did not ask gets standard frames only."""
    return {e.strip() for e in headers.get("x-courier-events", "").lower().split(",")}


class TurnFrames(Protocol):
    """What one endpoint's stream says about a turn: its wire, never its pacing."""

    head: bytes
    """The stream's first bytes (b"" for none)."""
    head_waits: bool
    """True: the head rides with the next bytes, saving a socket send, because it tells
    the client nothing on its own (chat's role chunk). False: it goes out at once
    (Responses' `response.created` names the response the client may act on)."""

    def frames(self, event: TurnEvent) -> bytes:
        """One event's frames (b"" for one this client did not ask to see)."""
        ...

    async def last(self, event: TurnFinished) -> bytes:
        """The frames that end the stream; may wait for what the end records."""
        ...

    def left(self) -> None:
        """The client went before the end (a closed tab, a voice interruption)."""
        ...


_BEAT = cast(TurnEvent, object())
"""Queued among a stream's events when a keepalive is due (never a turn's own event)."""


class _Keepalive:
    """Queues `_BEAT` on a stream's queue whenever `every` seconds pass with nothing sent.

    One timer serves the whole stream, moved on only when it fires: a timer per wait
    (`asyncio.timeout` around each `queue.get`) cost a timer handle, a context manager and
    a loop lookup on every batch of every stream, about 4 % of the event loop's work."""

    def __init__(self, queue: asyncio.Queue[TurnEvent], every: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue, self._every = queue, every
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + every, self._due)

    def sent(self) -> None:
        self._last = self._loop.time()

    def _due(self) -> None:
        now = self._loop.time()
        due = self._last + self._every
        if now >= due:
            self._queue.put_nowait(_BEAT)
            due = now + self._every
        self._timer = self._loop.call_at(due, self._due)

    def stop(self) -> None:
        self._timer.cancel()


async def turn_stream(
    handle: TurnHandle, frames: TurnFrames, keepalive_s: float, *, after: int = 0
) -> AsyncIterator[bytes]:
    """The turn's events after the first `after`, as `frames` writes them, until it ends;
    a keepalive comment whenever `keepalive_s` pass without a byte.

    Events already queued go out as one write: a socket write per event was the largest
    single cost of a fast stream, and joining only what is ready never delays a byte. The
    last write carries the response's end (`FinalFrame`)."""
    if handle.finished_at is not None and after >= handle.event_count():
        return  # a replay past the end of a finished turn: waiting would hang the client
    head: bytes | None = frames.head or None
    render = frames.frames
    queue = handle.subscribe(after)
    beat = _Keepalive(queue, keepalive_s)
    finished = False
    try:
        if head is not None and not frames.head_waits:
            yield head  # inside: a client gone after the head alone still stops the turn
            head = None
        while not finished:
            event = queue.get_nowait() if not queue.empty() else await queue.get()
            if event is _BEAT:
                yield head + KEEPALIVE if head is not None else KEEPALIVE
                beat.sent()
                head = None
                continue
            out: list[bytes] = [head] if head is not None else []
            head = None
            while True:
                if type(event) is TurnFinished:
                    out.append(await frames.last(event))
                    finished = True
                    break
                if event is not _BEAT:  # a beat due behind ready events: this write is one
                    out.append(render(event))
                if queue.empty():
                    break
                event = queue.get_nowait()
            if finished:
                yield FinalFrame(b"".join(out))
            elif body := b"".join(out):
                yield body
                beat.sent()  # the consumer asks for more once these are written
    finally:
        beat.stop()
        handle.unsubscribe(queue)
        if not finished:
            frames.left()
