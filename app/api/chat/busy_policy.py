"""Double-texting and the disconnect policy: what a request does when its session is busy,
and whether its turn outlives the client.

`X-Courier-Busy` (default per profile): `reject` answers 409 `session_busy` with
Retry-After; `enqueue` waits for the running turn to end, then runs; `interrupt` stops the
running turn (its visible text kept, open calls closed) and runs; `steer` hands the message
to the running turn, which stores it after its current tool batch. A steer the turn never
reached (it ended first) runs as an enqueued turn, so no message is lost. The session's
lease makes every strategy safe: two turns never run on one session at once.

`X-Courier-On-Disconnect` (default per profile): `cancel` stops a turn whose client hung
up; `continue` finishes it in the background, its events kept for `GET .../events?after=N`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast, get_args

from fastapi import Request
from fastapi.responses import JSONResponse

from app.agent.turns.handle import TurnHandle
from app.agent.turns.manager import TurnManager
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.errors import ApiError
from app.api.turn_serving import StartedTurn
from app.config import BusyStrategy, DisconnectPolicy, Profile

ENQUEUE_WAIT_S = 600.0
"""Longest a queued request waits for the session; then it is refused like `reject`."""
_POLL_S = 0.05
"""A lease held with no turn in view is between two turns (or another request's set-up)."""


@dataclass(frozen=True, slots=True)
class Steered:
    """The message joined the running turn; that turn's own client gets the answer."""

    handle: TurnHandle


def _choice(request: Request, header: str, allowed: tuple[str, ...], default: str) -> str:
    raw = request.headers.get(header)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in allowed:
        raise ApiError(
            400,
            f"{header} must be one of {', '.join(allowed)}",
            param=header,
            code="invalid_header",
        )
    return value


def busy_strategy(request: Request, profile: Profile) -> BusyStrategy:
    value = _choice(request, "X-Courier-Busy", get_args(BusyStrategy), profile.busy)
    return cast(BusyStrategy, value)


def disconnect_policy(request: Request, profile: Profile) -> DisconnectPolicy:
    allowed = get_args(DisconnectPolicy)
    value = _choice(request, "X-Courier-On-Disconnect", allowed, profile.on_disconnect)
    return cast(DisconnectPolicy, value)


def steer_text(chat: ChatCompletionRequest) -> str:
    """The text a steer delivers: the request's last message, which must be the user's."""
    last = chat.messages[-1]
    where = f"messages[{len(chat.messages) - 1}]"
    if last.role != "user":
        raise ApiError(400, "a steer sends a user message last", param=where, code="bad_steer")
    if isinstance(last.content, str):
        text = last.content
    else:
        parts = last.content or []
        if any(p.type != "text" for p in parts):
            raise ApiError(400, "a steer carries text only", param=where, code="bad_steer")
        text = "".join(p.text or "" for p in parts)
    if not text.strip():
        raise ApiError(400, "a steer needs some text", param=where, code="bad_steer")
    return text


async def start_when_free(
    turns: TurnManager,
    start: Callable[[], Awaitable[StartedTurn]],
    strategy: BusyStrategy,
    steer: str | None = None,
) -> StartedTurn | Steered:
    """`start()`, applying `strategy` while the session is busy."""
    deadline = time.monotonic() + ENQUEUE_WAIT_S
    steered = False
    while True:
        if turns.draining:  # checked again after each wait: a queued turn too
            raise ApiError(
                503,
                "the server is shutting down and takes no new turns; retry shortly",
                code="shutting_down",
                headers={"Retry-After": "5"},
            )
        try:
            return await start()
        except ApiError as exc:
            sid = exc.headers.get("X-Session-Id")
            if exc.code != "session_busy" or strategy == "reject" or sid is None:
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            handle = turns.latest_for(sid)
            if handle is None or handle.task is None or handle.finished_at is not None:
                await asyncio.sleep(_POLL_S)
                continue
            if strategy == "interrupt":
                handle.cancel()
            elif strategy == "steer" and steer is not None and not steered:
                steered = True  # once: a turn that ended first makes it an enqueued turn
                done = handle.steer(steer)
                waits: set[asyncio.Future[object]] = {done, handle.task}  # type: ignore[arg-type]
                await asyncio.wait(waits, timeout=remaining)
                if done.done() and not done.cancelled():
                    return Steered(handle)
                done.cancel()
            await asyncio.wait({handle.task}, timeout=max(deadline - time.monotonic(), 0))


def steered_response(steered: Steered) -> JSONResponse:
    """202: stored in the running turn, whose own client receives the answer."""
    handle = steered.handle
    body = {"object": "courier.steer", "session_id": handle.session_id, "turn_id": handle.turn_id}
    return JSONResponse(body, status_code=202, headers={"X-Session-Id": handle.session_id})
