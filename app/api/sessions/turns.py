"""Stop and observe a session's turns over plain HTTP.

`POST /v1/sessions/{id}/stop` ends the running turn (visible text kept, open tool calls
closed); `GET /v1/sessions/{id}/turns` lists every turn with its exit reason, upstream
calls, usage, cost and MCP calls (per server: calls, time, errors);
`GET /v1/sessions/{id}/events?after=N` (or with `Last-Event-ID: N`, as an EventSource
reconnects) replays the newest turn's events after sequence number N and follows it
live, so a client that dropped loses nothing.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from app.agent.turns.handle import TurnHandle
from app.api.http.deps import StateDep
from app.api.http.errors import ApiError
from app.api.http.owned import ChatSession
from app.api.http.sse import EventPosition, EventSourceResponse, last_event_id, turn_stream
from app.api.sessions.events import ReplayFrames
from app.api.state import AppState
from app.db.mcp_store import turn_totals
from app.db.turn_store import TurnSummary, session_turns

router = APIRouter()

STOP_WAIT_S = 5.0
"""How long a stop waits to report the turn's end; a tool ignoring cancellation for longer
is still stopped, and the answer says it had not finished yet."""


def _running(state: AppState, session_id: str) -> TurnHandle | None:
    handle = state.turns.latest_for(session_id)
    return handle if handle is not None and handle.finished_at is None else None


@router.post("/v1/sessions/{session_id}/stop")
async def stop_turn(session: ChatSession, state: StateDep) -> dict[str, Any]:
    session_id = session.id
    handle = _running(state, session_id)
    if handle is None:
        return {"object": "courier.turn_stop", "session_id": session_id, "turn_id": None}
    handle.cancel()
    exit_reason: str | None = None
    if handle.task is not None:
        done, _ = await asyncio.wait({handle.task}, timeout=STOP_WAIT_S)
        if done and (outcome := handle.outcome) is not None:
            exit_reason = outcome.exit_reason
    return {
        "object": "courier.turn_stop",
        "session_id": session_id,
        "turn_id": handle.turn_id,
        "exit_reason": exit_reason,
    }


NO_MCP: dict[str, Any] = {"calls": 0, "time_ms": 0.0, "servers": {}}


def _turn_out(turn: TurnSummary, running: set[str], mcp: dict[str, Any] = NO_MCP) -> dict[str, Any]:
    prompt = turn.input_tokens + turn.cache_read_tokens + turn.cache_write_tokens
    return {
        "id": turn.id,
        "status": "running" if turn.id in running else "finished",
        "started_at": turn.started_at,
        "ended_at": turn.finished_at,
        "exit_reason": turn.exit_reason,
        "error": turn.error,
        "iterations": turn.iterations,
        "upstream_calls": turn.upstream_calls,
        "profiles": turn.profiles,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": turn.output_tokens,
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "cache_read_tokens": turn.cache_read_tokens,
            "cache_write_tokens": turn.cache_write_tokens,
            "reasoning_tokens": turn.reasoning_tokens,
        },
        "cost_usd": turn.cost_usd,
        "known_cost_usd": str(turn.known_cost),
        "unpriced_calls": turn.unpriced_calls,
        "mcp": mcp,
    }


@router.get("/v1/sessions/{session_id}/turns")
async def list_turns(
    session: ChatSession,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    turns, total = session_turns(
        state.store.engine, session_id=session.id, limit=limit, offset=offset
    )
    running = set(state.turns.running)
    mcp = turn_totals(state.store, session_id=session.id, turn_ids=[t.id for t in turns])
    return {
        "object": "list",
        "session_id": session.id,
        "data": [_turn_out(t, running, mcp.get(t.id, NO_MCP)) for t in turns],
        "total": total,
        "limit": limit,
        "offset": offset,
        "has_more": offset + len(turns) < total,
    }


def resume_after(after: int, position: EventPosition | None) -> int:
    """Where a reconnecting client resumes: after the later of `after=` and the
    `Last-Event-ID` its EventSource sends (the id of the last event it got). `N.k` (event
    N cut after its k-th frame, as a chat stream numbers a many-frame event) resumes at N
    itself."""
    if position is None:
        return after
    return max(after, position.seq - 1 if position.part else position.seq)


@router.get("/v1/sessions/{session_id}/events")
async def turn_events(
    request: Request,
    session: ChatSession,
    state: StateDep,
    after: Annotated[int, Query(ge=0)] = 0,
) -> EventSourceResponse:
    """Events after `after` or the `Last-Event-ID` header (the SSE `id` is the sequence
    number), then the live ones; ends after `finished`."""
    after = resume_after(after, last_event_id(request.headers))
    handle = state.turns.latest_for(session.id)
    if handle is None:
        raise ApiError(
            404,
            f"session '{session.id}' has no turn this server still holds events for",
            code="turn_not_found",
        )
    frames = ReplayFrames(handle.turn_id, after)
    return EventSourceResponse(turn_stream(handle, frames, state.settings.keepalive_s, after=after))
