"""POST /v1/chat/completions: parse, authorize, start a turn, render JSON or SSE.

Parsing and the request's retry signals live here; starting the turn is
`app/api/chat/serving.py`; what the client receives is `app/api/chat/output.py`.
"""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.api.chat.busy_policy import (
    Steered,
    busy_strategy,
    disconnect_policy,
    start_when_free,
    steer_text,
    steered_response,
)
from app.api.chat.output import json_completion, sse_frames
from app.api.chat.render import CompletionRenderer
from app.api.chat.serving import Retry
from app.api.chat.wire import ChatCompletionRequest
from app.api.http import end_users
from app.api.http.body_limits import load_json_body, parse_off_loop
from app.api.http.deps import authenticate, read_limited_body, state_of, turn_slot
from app.api.http.direct import DirectRoute
from app.api.http.errors import ApiError, validation_error
from app.api.http.owned import check_binding
from app.api.http.sse import EventSourceResponse
from app.security.principal import CHAT

router = APIRouter(route_class=DirectRoute)


def parse_request(body: bytes) -> ChatCompletionRequest:
    data = load_json_body(body)  # bounded: every failure is a 400 (app/api/http/body_limits.py)
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
    count = request.headers.get("x-stainless-retry-count")
    tries = int(count) if count is not None and count.isdigit() else None
    return Retry(
        digest=hashlib.sha256(body).hexdigest(),
        key=key,
        marked=tries is not None and tries >= 1,
        first_try=tries == 0,
    )


def session_header(request: Request) -> str | None:
    raw = request.headers.get("x-session-id")
    if raw is not None and not raw.strip():
        raise ApiError(
            400, "X-Session-Id is empty", param="X-Session-Id", code="invalid_session_id"
        )
    return raw


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    # Resolved here, not through `Depends`: the route is a `DirectRoute` (app/api/http/direct.py).
    state = state_of(request)
    principal = authenticate(request, state, CHAT)
    body = await read_limited_body(request, state.settings.max_body_bytes)
    chat = await parse_off_loop(body, parse_request)
    session_id = session_header(request) or chat.session_id
    check_binding(principal, session_id)
    on_behalf = end_users.on_behalf(
        request.headers, state.settings, user=chat.user, safety_identifier=chat.safety_identifier
    )
    profile = state.chat.resolve_profile(chat.model)
    strategy = busy_strategy(request, profile)
    on_disconnect = disconnect_policy(request, profile)
    slot = turn_slot(state, principal)
    try:
        started = await start_when_free(
            state,
            lambda: state.chat.start(
                chat,
                principal,
                session_id,
                retry=retry_of(request, body),
                on_behalf=on_behalf,
            ),
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
