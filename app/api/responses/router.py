"""POST /v1/responses (JSON or SSE), GET/DELETE /v1/responses/{id}, and its input items."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.agent.events import ToolFinished, ToolStarted, TurnFinished, TurnText
from app.agent.turns.manager import SessionBusy
from app.api.chat.output import client_gone
from app.api.chat.render import error_payload, retry_headers, tool_event_payload
from app.api.chat.router import retry_of
from app.api.http import end_users
from app.api.http.body_limits import load_json_object
from app.api.http.deps import StateDep, authenticate, read_limited_body, state_of, turn_slot
from app.api.http.direct import DirectRoute
from app.api.http.errors import ApiError, validation_error
from app.api.http.owned import ReachableResponse, response_not_found
from app.api.http.statuses import turn_error_status
from app.api.responses.serving import (
    ResponseNotFound,
    ResponseRun,
    ResponsesServing,
    TokenSessionMismatch,
)
from app.api.responses.wire import EventRenderer, ResponseCreateRequest
from app.api.state import AppState
from app.security.principal import CHAT

router = APIRouter()


def serving(state: AppState) -> ResponsesServing:
    return state.responses


def parse_request(body: bytes) -> ResponseCreateRequest:
    data = load_json_object(body)  # bounded as the chat route: every failure a 400
    try:
        return ResponseCreateRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


async def create_response(request: Request) -> Response:
    # Resolved here, not through `Depends`: the route is a `DirectRoute` (app/api/http/direct.py).
    state = state_of(request)
    principal = authenticate(request, state, CHAT)
    raw = await read_limited_body(request, state.settings.max_body_bytes)
    body = parse_request(raw)
    on_behalf = end_users.on_behalf(
        request.headers, state.settings, user=body.user, safety_identifier=body.safety_identifier
    )
    slot = turn_slot(state, principal)
    try:
        run = await serving(state).start(
            body, principal, retry=retry_of(request, b"responses\n" + raw), on_behalf=on_behalf
        )
    except ResponseNotFound as exc:
        slot.release()
        raise response_not_found(exc) from None
    except TokenSessionMismatch:
        slot.release()
        raise ApiError(
            403,
            "this token is bound to one session; continue it with previous_response_id",
            code="token_session_mismatch",
        ) from None
    except BaseException:
        slot.release()
        raise
    slot.bind(run.handle.task)
    headers = {"X-Session-Id": run.shell.session_id} if body.store else {}
    if ignored := body.ignored_fields():
        # Named, not silently dropped: the same courtesy the chat route gives.
        headers["X-Courier-Ignored"] = ", ".join(ignored)
    if body.stream:
        opted_in = "tools" in request.headers.get("x-courier-events", "").lower().split(",")
        return EventSourceResponse(
            frames(run, state.settings.keepalive_s, tool_events=opted_in),
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            ping=0,
            sep="\n",
        )
    hangup = asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait({run.done, hangup}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        run.handle.abandon()
        raise
    finally:
        hangup.cancel()
    if not run.done.done():
        # The client hung up (an SDK timeout): stop the turn as a stream would; the
        # recorder still stores the cancelled response.
        run.handle.abandon()
        return Response(status_code=499)
    final, finished = run.done.result()
    if finished.error is not None and not final["output"]:
        err = finished.error
        return JSONResponse(
            error_payload(err),
            status_code=turn_error_status(err),
            headers={**headers, **retry_headers(err)},
        )
    run.handle.delivered = True
    return JSONResponse(final, headers=headers)


router.add_api_route(
    "/v1/responses", create_response, methods=["POST"], route_class_override=DirectRoute
)


async def frames(
    run: ResponseRun, keepalive_s: float, *, tool_events: bool = False
) -> AsyncIterator[ServerSentEvent]:
    """The spec's event sequence; `: keepalive` comments while tools run; named
    `courier.tool` frames only for a client that asked."""
    renderer = EventRenderer(run.shell)
    for name, data in renderer.start():
        yield ServerSentEvent(event=name, data=data)
    queue = run.handle.subscribe()
    finished = False
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=keepalive_s)
            except TimeoutError:
                yield ServerSentEvent(comment="keepalive")
                continue
            if isinstance(event, TurnText):
                for name, data in renderer.text_delta(event.text):
                    yield ServerSentEvent(event=name, data=data)
            elif tool_events and isinstance(event, ToolStarted | ToolFinished):
                payload = json.dumps(tool_event_payload(event), separators=(",", ":"))
                yield ServerSentEvent(event="courier.tool", data=payload)
            elif isinstance(event, TurnFinished):
                finished = True
                final, _ = await asyncio.shield(run.done)
                for name, data in renderer.finish(final):
                    yield ServerSentEvent(event=name, data=data)
                run.handle.delivered = True
                return
    finally:
        run.handle.unsubscribe(queue)
        if not finished:
            run.handle.abandon()


@router.get("/v1/responses/{response_id}")
async def get_response(row: ReachableResponse) -> Any:
    return JSONResponse(json.loads(row.body))


@router.delete("/v1/responses/{response_id}")
async def delete_response(row: ReachableResponse, state: StateDep) -> Any:
    try:
        serving(state).retract(row)
    except SessionBusy:
        raise ApiError(
            409, "a turn is running on this response's session", code="session_busy"
        ) from None
    return {"id": row.id, "object": "response", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(
    row: ReachableResponse,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    items: list[dict[str, Any]] = json.loads(row.input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i.get("id") for i in items]
        if after not in ids:
            raise ApiError(400, f"no input item '{after}' in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else "",
        "last_id": page[-1]["id"] if page else "",
        "has_more": len(items) > limit,
    }
