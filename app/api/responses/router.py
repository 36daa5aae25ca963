"""POST /v1/responses (JSON or SSE), GET/DELETE /v1/responses/{id}, and its input items.

Starting the response is `app/api/responses/serving.py`'s; what the client receives is
`app/api/responses/render.py`'s, streamed by `app/api/http/sse.py`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from app.agent.turns.manager import SessionBusy
from app.api.http import end_users
from app.api.http.body_limits import load_json_object
from app.api.http.deps import (
    StateDep,
    authenticate,
    holding_turn_slot,
    read_limited_body,
    state_of,
)
from app.api.http.direct import DirectRoute
from app.api.http.errors import ApiError, validation_error
from app.api.http.owned import ReachableResponse
from app.api.http.sse import EventSourceResponse, opted_in, turn_stream
from app.api.responses.background import BackgroundRuns
from app.api.responses.render import ResponseFrames, json_answer
from app.api.responses.serving import ResponsesServing
from app.api.responses.wire import ResponseCreateRequest
from app.api.retries import retry_of
from app.api.turn_serving import Asked
from app.db.session_models import ResponseRow
from app.security.principal import CHAT

router = APIRouter()

SERVING = "responses_serving"
"""Where the lifespan puts the serving object on `app.state` (vLLM's habit: one per endpoint)."""


def responses_serving(request: Request) -> ResponsesServing:
    serving: ResponsesServing = getattr(request.app.state, SERVING)
    return serving


async def _serving(request: Request) -> ResponsesServing:
    return responses_serving(request)


ServingDep = Annotated[ResponsesServing, Depends(_serving)]


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
    retry = retry_of(request, b"responses\n" + raw)
    with holding_turn_slot(state, principal, end_user=on_behalf.end_user) as slot:
        run = await responses_serving(request).start(body, Asked(principal, on_behalf), retry=retry)
    slot.bind(run.handle.task)
    headers = run.shell.headers()
    if run.background is not None:
        # No client owns a background turn: none of these answers can cancel it.
        if not body.stream:
            return JSONResponse(run.shell.body(status="queued", output=[]), headers=headers)
        follow = run.background.follow(-1, state.settings.keepalive_s)
        return EventSourceResponse(follow, headers=headers)
    if not body.stream:
        return await json_answer(
            request, run.handle, run.done, headers, grace_s=retry.hangup_grace_s
        )
    tools = "tools" in opted_in(request.headers)
    frames = ResponseFrames(run.shell, run.handle, run.done, tool_events=tools)
    stream = turn_stream(run.handle, frames, state.settings.keepalive_s)
    return EventSourceResponse(stream, headers=headers)


router.add_api_route(
    "/v1/responses", create_response, methods=["POST"], route_class_override=DirectRoute
)


def _background(serving: ResponsesServing, row: ResponseRow, what: str) -> BackgroundRuns:
    if not row.background or serving.background is None:
        raise ApiError(400, f"only a background response can be {what}", code="invalid_request")
    return serving.background


@router.get("/v1/responses/{response_id}")
async def get_response(
    row: ReachableResponse,
    serving: ServingDep,
    state: StateDep,
    stream: bool = False,
    starting_after: int | None = None,
) -> Any:
    """The stored (or, while it runs here, the live) response; `stream=true` replays a
    background response's events after `starting_after`, then follows them live.
    (`include` and `include_obfuscation` are accepted and ignored: Courier adds no
    obfuscation.)"""
    if not stream:
        if serving.background is None:
            return JSONResponse(json.loads(row.body))
        return JSONResponse(serving.background.body(row))
    runs = _background(serving, row, "streamed again")
    if starting_after is not None and starting_after < 0:
        raise ApiError(
            400,
            "starting_after must be a sequence number (0 or more)",
            param="starting_after",
            code="invalid_starting_after",
        )
    after = -1 if starting_after is None else starting_after
    frames = runs.stream(row, after=after, keepalive_s=state.settings.keepalive_s)
    return EventSourceResponse(frames)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(row: ReachableResponse, serving: ServingDep) -> Any:
    """Stop a running background response; cancelling a finished one answers with its
    stored body unchanged (as OpenAI: cancelling twice is harmless)."""
    return JSONResponse(await _background(serving, row, "cancelled").cancel(row))


@router.delete("/v1/responses/{response_id}")
async def delete_response(row: ReachableResponse, serving: ServingDep) -> Any:
    try:
        serving.retract(row)
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
