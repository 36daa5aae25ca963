"""POST /v1/chat/completions: parse, authorize, start a turn, answer in JSON or SSE.

Starting the turn is `app/api/chat/serving.py`'s; what the client receives is
`app/api/chat/render.py`'s, streamed by `app/api/http/sse.py`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.chat.busy_policy import busy_strategy, disconnect_policy, steered_response
from app.api.chat.parse import validated
from app.api.chat.render import ChatFrames, CompletionRenderer, json_completion
from app.api.chat.serving import ChatServing, Steered
from app.api.http import end_users
from app.api.http.body_limits import read_json_body
from app.api.http.deps import authenticate, holding_turn_slot, read_limited_body, state_of
from app.api.http.direct import DirectRoute
from app.api.http.errors import ApiError
from app.api.http.owned import check_binding
from app.api.http.sse import EventSourceResponse, last_event_id, opted_in, turn_stream
from app.api.retries import retry_of
from app.api.turn_serving import Asked
from app.security.principal import CHAT

router = APIRouter(route_class=DirectRoute)

SERVING = "chat_serving"
"""Where the lifespan puts the serving object on `app.state` (vLLM's habit: one per endpoint)."""


def chat_serving(request: Request) -> ChatServing:
    serving: ChatServing = getattr(request.app.state, SERVING)
    return serving


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
    raw = await read_limited_body(request, state.settings.max_body_bytes)
    data = await read_json_body(raw)  # bounded: every failure is a 400
    serving = chat_serving(request)
    shortcut = None
    if request.headers.get("x-session-id") is None:
        shortcut = await serving.shortcut(data, principal, request.headers)
    chat = shortcut.request if shortcut is not None else await validated(data)
    session_id = session_header(request) or chat.session_id
    check_binding(principal, session_id)
    on_behalf = end_users.on_behalf(
        request.headers, state.settings, user=chat.user, safety_identifier=chat.safety_identifier
    )
    profile = serving.resolve_profile(chat.model)
    strategy, on_disconnect = busy_strategy(request, profile), disconnect_policy(request, profile)
    if strategy == "steer" and shortcut is not None:
        # A steer's errors name the request's last message by its index: the whole one's.
        chat, shortcut = await validated(data), None
    retry = retry_of(request, raw)
    resume_at = last_event_id(request.headers)  # refused before anything starts if malformed
    with holding_turn_slot(state, principal, end_user=on_behalf.end_user) as slot:
        started = await serving.answer(
            chat,
            Asked(principal, on_behalf),
            session_id,
            retry=retry,
            strategy=strategy,
            shortcut=shortcut,
        )
    if isinstance(started, Steered):
        slot.release()  # the message joined a turn that already holds its own slot
        return steered_response(started)
    slot.bind(started.handle.task)
    started.handle.on_disconnect = on_disconnect
    headers = {"X-Session-Id": started.session_id}
    if ignored := serving.ignored(chat, started.profile):
        headers["X-Courier-Ignored"] = ", ".join(ignored)
    renderer = CompletionRenderer.of(chat, started.handle)
    if not chat.stream:
        grace_s = retry.hangup_grace_s
        return await json_completion(request, started.handle, renderer, headers, grace_s=grace_s)
    # A position only means something on the turn it came from: a new turn starts over.
    resume = resume_at if started.reattached else None
    frames = ChatFrames(renderer, started.handle, opted_in=opted_in(request.headers), resume=resume)
    stream = turn_stream(started.handle, frames, state.settings.keepalive_s, after=frames.after)
    return EventSourceResponse(stream, headers=headers)
