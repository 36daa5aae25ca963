"""POST /v1/chat/completions: parse, authorize, start a turn, render JSON or SSE."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnText,
)
from app.agent.turns import TurnHandle
from app.protocol.errors import ApiError, validation_error
from app.protocol.openai import ChatCompletionRequest
from app.protocol.render import (
    CompletionRenderer,
    approval_event_payload,
    error_payload,
    tool_event_payload,
)
from app.routes.deps import PrincipalDep, StateDep, read_limited_body, turn_slot

router = APIRouter()


def parse_request(body: bytes) -> ChatCompletionRequest:
    try:
        data = json.loads(body.decode("utf-8"))
        # A lone surrogate ("\ud800") parses but cannot be stored or sent upstream: refuse
        # it here rather than fail half-way through creating the session.
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (json.JSONDecodeError, UnicodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def idempotency(request: Request, body: bytes) -> tuple[str, str] | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= 255:
        raise ApiError(400, "Idempotency-Key must be 1-255 characters", param="Idempotency-Key")
    return key, hashlib.sha256(body).hexdigest()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, state: StateDep, principal: PrincipalDep) -> Response:
    body = await read_limited_body(request, state.settings.max_body_bytes)
    chat = parse_request(body)
    session_header = request.headers.get("x-session-id") or chat.session_id
    if principal.session_id is not None and session_header != principal.session_id:
        raise ApiError(
            403,
            "this token is bound to one session; send its id in X-Session-Id",
            code="token_session_mismatch",
        )
    slot = turn_slot(state, principal)
    try:
        started = state.chat.start(
            chat, principal, session_header, idempotency=idempotency(request, body)
        )
    except BaseException:
        slot.release()
        raise
    slot.bind(started.handle.task)
    headers = {"X-Session-Id": started.session_id}
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
    return await json_completion(started.handle, renderer, headers)


async def json_completion(
    handle: TurnHandle, renderer: CompletionRenderer, headers: dict[str, str]
) -> Response:
    text: list[str] = []
    finished: TurnFinished | None = None
    try:
        async for event in handle.events():
            if isinstance(event, TurnText):
                text.append(event.text)
            elif isinstance(event, TurnFinished):
                finished = event
    except asyncio.CancelledError:
        handle.abandon()
        raise
    assert finished is not None
    headers = {
        **headers,
        "X-Courier-Upstream-Calls": str(finished.upstream_calls),
        "X-Courier-Cost-USD": str(finished.cost.amount)
        if finished.cost.amount is not None
        else "unknown",
    }
    if finished.error is not None:
        err = finished.error
        return JSONResponse(error_payload(err), status_code=err.status, headers=headers)
    return JSONResponse(renderer.completion("".join(text), finished), headers=headers)


async def sse_frames(
    handle: TurnHandle,
    renderer: CompletionRenderer,
    keepalive_s: float,
    *,
    tool_events: bool = False,
    approval_events: bool = False,
) -> AsyncIterator[ServerSentEvent]:
    """Standard chunks, a comment line whenever `keepalive_s` pass without a byte, and
    named `courier.tool` frames only for a client that asked (plain SDKs would choke)."""
    yield ServerSentEvent(data=renderer.role_chunk())
    queue = handle.subscribe()
    finished = False
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=keepalive_s)
            except TimeoutError:
                yield ServerSentEvent(comment="keepalive")
                continue
            if isinstance(event, TurnText):
                yield ServerSentEvent(data=renderer.text_chunk(event.text))
            elif tool_events and isinstance(event, ToolStarted | ToolFinished):
                yield ServerSentEvent(event="courier.tool", data=tool_event_payload(event))
            elif approval_events and isinstance(event, ApprovalRequested | ApprovalResolved):
                yield ServerSentEvent(event="courier.approval", data=approval_event_payload(event))
            elif isinstance(event, TurnFinished):
                finished = True
                if event.error is not None:
                    # Headers are gone: the error travels inside the stream.
                    yield ServerSentEvent(data=json.dumps(error_payload(event.error)))
                else:
                    yield ServerSentEvent(data=renderer.finish_chunk(event))
                    if renderer.include_usage:
                        yield ServerSentEvent(data=renderer.usage_chunk(event))
                yield ServerSentEvent(data="[DONE]")
                return
    finally:
        handle.unsubscribe(queue)
        if not finished:
            # The client went away (a voice interruption, a closed tab): stop the work,
            # unless an idempotency key lets a retry reattach within the grace period.
            handle.abandon()
