"""A chat turn's events as the client asked for them: one JSON completion, or SSE chunks.

Streams carry standard chunks only, a keepalive comment whenever `keepalive_s` pass without
a byte, and progress chunks for a client that opted in; the JSON path waits for the end and
cancels the turn if the client hangs up first (an SDK timeout), so its retry does not find
the first attempt still running tools beside it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import cast

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ClientToolCalls,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnFinished,
    TurnText,
)
from app.agent.turns.handle import TurnHandle
from app.api.chat.render import (
    CompletionRenderer,
    approval_event_payload,
    error_payload,
    retry_headers,
    tool_event_payload,
)
from app.api.http.sse import FinalFrame, ServerSentEvent
from app.api.http.statuses import turn_error_status
from app.providers.base import ToolCall


async def client_gone(request: Request) -> None:
    """Returns when the client hangs up (the body is already read, so the next ASGI
    message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _collect(handle: TurnHandle) -> tuple[str, tuple[ToolCall, ...], TurnFinished]:
    text: list[str] = []
    calls: tuple[ToolCall, ...] = ()
    async for event in handle.events():
        if isinstance(event, TurnText):
            text.append(event.text)
        elif isinstance(event, ClientToolCalls):
            calls = event.calls
        elif isinstance(event, TurnFinished):
            return "".join(text), calls, event
    raise AssertionError("a turn's events end with TurnFinished")


async def json_completion(
    request: Request, handle: TurnHandle, renderer: CompletionRenderer, headers: dict[str, str]
) -> Response:
    collect = asyncio.ensure_future(_collect(handle))
    hangup = asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait({collect, hangup}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        handle.abandon()
        raise
    finally:
        hangup.cancel()
    if not collect.done():
        # The client hung up (an SDK timeout): stop the turn as a stream would, so its
        # retry does not find the first attempt still running tools beside it.
        collect.cancel()
        await asyncio.gather(collect, return_exceptions=True)
        handle.abandon()
        return Response(status_code=499)
    text, calls, finished = collect.result()
    headers = {
        **headers,
        "X-Courier-Upstream-Calls": str(finished.upstream_calls),
        "X-Courier-Cost-USD": str(finished.cost.amount)
        if finished.cost.amount is not None
        else "unknown",
    }
    if finished.error is not None:
        err = finished.error
        return JSONResponse(
            error_payload(err),
            status_code=turn_error_status(err),
            headers={**headers, **retry_headers(err)},
        )
    handle.delivered = True
    return JSONResponse(renderer.completion(text, finished, calls), headers=headers)


_BEAT = cast(TurnEvent, object())
"""Queued among a stream's events when a keepalive is due (never a turn's own event)."""
_KEEPALIVE_FRAME = ServerSentEvent(comment="keepalive").encode()


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


async def sse_frames(
    handle: TurnHandle,
    renderer: CompletionRenderer,
    keepalive_s: float,
    *,
    tool_events: bool = False,
    approval_events: bool = False,
) -> AsyncIterator[ServerSentEvent | bytes]:
    """Standard chunks, a comment line whenever `keepalive_s` pass without a byte, and
    progress chunks only for a client that asked.

    Events already queued go out as one write: a socket write per chunk was the largest
    single cost of a fast stream, and joining only what is ready never delays a byte. The
    role chunk rides with the first of them (the headers are already out, so the client
    waits for nothing), and the last with the response's end."""
    role: bytes | None = ServerSentEvent(data=renderer.role_chunk()).encode()
    opted = {"tool_events": tool_events, "approval_events": approval_events}
    queue = handle.subscribe()
    beat = _Keepalive(queue, keepalive_s)
    finished = False
    try:
        while not finished:
            event = queue.get_nowait() if not queue.empty() else await queue.get()
            if event is _BEAT:
                yield role + _KEEPALIVE_FRAME if role is not None else _KEEPALIVE_FRAME
                beat.sent()
                role = None
                continue
            frames: list[bytes] = [role] if role is not None else []
            role = None
            while True:
                if type(event) is TurnText:  # most events: straight to bytes
                    frames.append(renderer.text_sse(event.text))
                else:
                    frames += [frame.encode() for frame in event_frames(event, renderer, **opted)]
                finished = isinstance(event, TurnFinished)
                if finished or queue.empty():
                    break
                event = queue.get_nowait()
            if finished:
                assert isinstance(event, TurnFinished)
                handle.delivered = event.error is None
                yield FinalFrame(b"".join(frames))
            elif frames:
                yield b"".join(frames)
                beat.sent()  # the consumer asks for more once these are written
    finally:
        beat.stop()
        handle.unsubscribe(queue)
        if not finished:
            # The client went away (a voice interruption, a closed tab): stop the work,
            # unless an idempotency key lets a retry reattach within the grace period.
            handle.abandon()


def event_frames(
    event: TurnEvent,
    renderer: CompletionRenderer,
    *,
    tool_events: bool,
    approval_events: bool = False,
) -> list[ServerSentEvent]:
    """The frames one turn event becomes (none for events this client did not ask for)."""
    if isinstance(event, TurnText):
        return [ServerSentEvent(data=renderer.text_chunk(event.text))]
    if isinstance(event, ClientToolCalls):
        return [ServerSentEvent(data=chunk) for chunk in renderer.tool_call_chunks(event.calls)]
    if tool_events and isinstance(event, ToolStarted | ToolFinished):
        return [ServerSentEvent(data=renderer.progress_chunk(tool_event_payload(event)))]
    if approval_events and isinstance(event, ApprovalRequested | ApprovalResolved):
        return [ServerSentEvent(data=renderer.progress_chunk(approval_event_payload(event)))]
    if not isinstance(event, TurnFinished):
        return []
    if event.error is not None:
        # Headers are gone: the error travels inside the stream.
        frames = [ServerSentEvent(data=json.dumps(error_payload(event.error)))]
    else:
        frames = [ServerSentEvent(data=renderer.finish_chunk(event))]
        if renderer.include_usage:
            frames.append(ServerSentEvent(data=renderer.usage_chunk(event)))
    return [*frames, ServerSentEvent(data="[DONE]")]
