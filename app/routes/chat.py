"""POST /v1/chat/completions: parse, authorize, start a turn, render JSON or SSE."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

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
from app.agent.turns import TurnHandle
from app.protocol.errors import ApiError, validation_error
from app.protocol.limits import load_json_body, parse_off_loop
from app.protocol.openai import ChatCompletionRequest
from app.protocol.refusals import turn_error_status
from app.protocol.render import (
    CompletionRenderer,
    approval_event_payload,
    error_payload,
    retry_headers,
    tool_event_payload,
)
from app.providers.base import ToolCall
from app.routes.busy import (
    Steered,
    busy_strategy,
    disconnect_policy,
    start_when_free,
    steer_text,
    steered_response,
)
from app.routes.deps import PrincipalDep, StateDep, read_limited_body, turn_slot
from app.routes.event_stream import EventSourceResponse, ServerSentEvent
from app.serving import Retry

router = APIRouter()


def parse_request(body: bytes) -> ChatCompletionRequest:
    data = load_json_body(body)  # bounded: every failure is a 400 (app/protocol/limits.py)
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def retry_of(request: Request, body: bytes) -> Retry:
    """The request's retry signals: an explicit Idempotency-Key, the SDK's retry counter,
    and the body digest that makes a byte-identical repeat recognisable without either."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 255:
        raise ApiError(400, "Idempotency-Key must be 1-255 characters", param="Idempotency-Key")
    count = request.headers.get("x-stainless-retry-count", "0")
    marked = count.isdigit() and int(count) >= 1
    return Retry(digest=hashlib.sha256(body).hexdigest(), key=key, marked=marked)


def session_header(request: Request) -> str | None:
    raw = request.headers.get("x-session-id")
    if raw is not None and not raw.strip():
        raise ApiError(
            400, "X-Session-Id is empty", param="X-Session-Id", code="invalid_session_id"
        )
    return raw


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, state: StateDep, principal: PrincipalDep) -> Response:
    body = await read_limited_body(request, state.settings.max_body_bytes)
    chat = await parse_off_loop(body, parse_request)
    session_id = session_header(request) or chat.session_id
    if principal.session_id is not None and session_id != principal.session_id:
        raise ApiError(
            403,
            "this token is bound to one session; send its id in X-Session-Id",
            code="token_session_mismatch",
        )
    profile = state.chat.resolve_profile(chat.model)
    strategy = busy_strategy(request, profile)
    on_disconnect = disconnect_policy(request, profile)
    slot = turn_slot(state, principal)
    try:
        started = await start_when_free(
            state,
            lambda: state.chat.start(chat, principal, session_id, retry=retry_of(request, body)),
            strategy,
            steer_text(chat) if strategy == "steer" else None,
        )
    except BaseException:
        slot.release()
        raise
    if isinstance(started, Steered):
        slot.release()  # the message joined a turn that already holds its own slot
        return steered_response(started)
    slot.bind(started.handle.task)
    started.handle.on_disconnect = on_disconnect
    headers = {"X-Session-Id": started.session_id}
    if started.ignored:
        headers["X-Courier-Ignored"] = ", ".join(started.ignored)
    renderer = CompletionRenderer(
        chat.model, include_usage=bool(chat.stream_options and chat.stream_options.include_usage)
    )
    renderer.adopt(started.handle)
    if chat.stream:
        wanted = {e.strip() for e in request.headers.get("x-courier-events", "").lower().split(",")}
        return EventSourceResponse(
            sse_frames(
                started.handle,
                renderer,
                state.settings.keepalive_s,
                tool_events="tools" in wanted,
                approval_events="approvals" in wanted,
            ),
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            ping=0,
            sep="\n",
        )
    return await json_completion(request, started.handle, renderer, headers)


async def _disconnected(request: Request) -> None:
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
    hangup = asyncio.ensure_future(_disconnected(request))
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
    single cost of a fast stream, and joining only what is ready never delays a byte."""
    yield ServerSentEvent(data=renderer.role_chunk())
    queue = handle.subscribe()
    finished = False
    try:
        while not finished:
            try:
                # No task per event (3.11's wait_for makes one): a ready event is taken at
                # once, and a wait is a timer on this task.
                if queue.empty():
                    async with asyncio.timeout(keepalive_s):
                        event = await queue.get()
                else:
                    event = queue.get_nowait()
            except TimeoutError:
                yield ServerSentEvent(comment="keepalive")
                continue
            opted = {"tool_events": tool_events, "approval_events": approval_events}
            frames = event_frames(event, renderer, **opted)
            finished = isinstance(event, TurnFinished)
            while not finished and not queue.empty():
                event = queue.get_nowait()
                frames += event_frames(event, renderer, **opted)
                finished = isinstance(event, TurnFinished)
            if finished:
                assert isinstance(event, TurnFinished)
                handle.delivered = event.error is None
            if frames:
                yield b"".join(frame.encode() for frame in frames)
    finally:
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
