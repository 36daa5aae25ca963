"""The sessions API: list, read, page messages, fork, retract or purge, search, cost, usage.

Owner or admin only, within a token's binding (`app/api/http/owned.py` resolves every
session id); another principal's session answers exactly like a missing one, so ids
cannot be probed. A retracted session is gone for its owner and visible to the admin.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from app.api.http.body_limits import load_json_object
from app.api.http.deps import PrincipalDep, ReaderDep, StateDep
from app.api.http.end_users import MAX_CHARS, listing_scope
from app.api.http.errors import ApiError
from app.api.http.owned import ChatSession, ReadSession, ReadSummary, visible_summary
from app.api.sessions.cost import cost_report, profile_pricer
from app.api.sessions.service import ForkPointMissing, ProfileGone, SessionBusy, SessionService
from app.api.state import AppState
from app.db import session_query as q
from app.db.models import SessionRow
from app.db.tool_store import fts_terms, search_sessions

router = APIRouter()

Limit = Annotated[int, Query(ge=1, le=100)]
EndUserQuery = Annotated[str | None, Query(max_length=MAX_CHARS)]


def session_json(state: AppState, summary: q.SessionSummary) -> dict[str, Any]:
    s: SessionRow = summary.session
    report = cost_report(summary.calls, profile_pricer(state.profiles.by_name), buckets=False)
    return {
        "id": s.id,
        "object": "courier.session",
        "title": summary.title,
        "profile": s.profile,
        "user": s.end_user or None,
        "created_at": int(s.started_at),
        "last_active_at": int(s.updated_at),
        "turns": summary.turns,
        "cost_usd": None if report.cost is None else str(report.cost),
        "cache_savings_usd": None if report.savings is None else str(report.savings),
        "upstream_calls": report.calls,
        "state": "purged" if summary.purged else "retracted" if summary.retracted else "live",
    }


def _service(state: AppState) -> SessionService:
    return SessionService(
        store=state.store, profiles=state.profiles, setup=state.setup, turns=state.turns
    )


@router.get("/v1/sessions")
async def list_sessions(
    request: Request,
    state: StateDep,
    principal: ReaderDep,
    limit: Limit = 20,
    cursor: str | None = None,
    after: str | None = None,
    user: EndUserQuery = None,
) -> dict[str, Any]:
    """Newest first. `cursor` (or `after`) is the previous page's `next_cursor`. An admin
    key lists every principal's sessions, retracted ones included. `user` lists one end
    user's; a request whose headers name an end user lists only that one's. A token bound to
    one session lists that one (on the first page: filtering a page of the key's sessions
    would leave it out whenever 20 newer ones exist)."""
    end_user = listing_scope(request.headers, state.settings, requested=user)
    if principal.session_id is not None:
        bound = (
            None
            if cursor or after
            else visible_summary(state, principal, principal.session_id, end_user)
        )
        rows, more = ([bound] if bound is not None else []), False
    else:
        rows, more = q.list_sessions(
            state.store,
            owner=None if principal.admin else principal.owner,
            limit=limit,
            before=cursor or after,
            include_retracted=principal.admin,
            end_user=end_user,
        )
    # Pricing is CPU work: off the event loop, so running streams keep flowing.
    data = await asyncio.to_thread(lambda: [session_json(state, r) for r in rows])
    return {
        "object": "list",
        "data": data,
        "has_more": more,
        "next_cursor": rows[-1].session.id if more and rows else None,
    }


@router.get("/v1/sessions/search")
async def search(
    request: Request,
    state: StateDep,
    principal: ReaderDep,
    q_: Annotated[str, Query(alias="q", min_length=1, max_length=1000)],
    limit: Annotated[int, Query(ge=1, le=50)] = 10,
    user: EndUserQuery = None,
) -> dict[str, Any]:
    """Full text over the caller's own sessions (an admin searches only its own too: this
    is recall, not surveillance), narrowed to one end user's as the listing is. Retracted
    rows never match."""
    terms = fts_terms(q_)
    if not terms:
        raise ApiError(400, "q has no searchable words", param="q", code="invalid_query")
    end_user = listing_scope(request.headers, state.settings, requested=user)
    # Off the loop: it waits for the index to catch up on the writer thread, and a common
    # term's ranking at a million rows takes milliseconds.
    hits = await asyncio.to_thread(
        partial(
            search_sessions,
            state.store,
            owner=principal.owner,
            end_user=end_user,
            terms=terms,
            limit=limit,
            session_id=principal.session_id,  # a bound token searches its session only
        )
    )
    titles = q.titles(state.store, session_ids=[h.session_id for h in hits])
    return {
        "object": "list",
        "data": [
            {
                "session_id": h.session_id,
                "title": titles.get(h.session_id, ""),
                "message_id": h.message_id,
                "role": h.role,
                "state": "archived" if h.archived else "live",
                "snippet": h.snippet,
                "session_created_at": int(h.session_started_at),
            }
            for h in hits
        ],
        "has_more": False,
    }


@router.get("/v1/sessions/{session_id}")
async def get_session(summary: ReadSummary, state: StateDep) -> dict[str, Any]:
    return await asyncio.to_thread(session_json, state, summary)


@router.get("/v1/sessions/{session_id}/messages")
async def list_messages(
    session: ReadSession,
    state: StateDep,
    limit: Limit = 50,
    cursor: Annotated[int | None, Query(ge=0)] = None,
    after: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    """Oldest first, every row: live, archived by a compaction, or retracted."""
    rows, more = q.messages_page(
        state.store,
        session_id=session.id,
        after=cursor if cursor is not None else after,
        limit=limit,
    )
    return {
        "object": "list",
        "data": [
            {
                "id": m.row.id,
                "object": "courier.message",
                "role": m.row.role,
                "content": m.row.content,
                # The exact text the model saw; the display text when they never differed.
                "api_content": m.row.api_content
                if m.row.api_content is not None
                else m.row.content,
                "tool_calls": m.tool_calls,
                "images": m.images,
                "tool_call_id": m.row.tool_call_id,
                "tool_name": m.row.tool_name,
                "is_error": m.row.is_error,
                "kind": m.row.kind,
                "turn_id": m.row.turn_id,
                "state": m.state,
                "created_at": int(m.row.created_at),
            }
            for m in rows
        ],
        "has_more": more,
        "next_cursor": str(rows[-1].row.id) if more and rows else None,
    }


@router.post("/v1/sessions/{session_id}/fork")
async def fork_session(session: ChatSession, request: Request, state: StateDep) -> dict[str, Any]:
    """Body `{"message_id": N}` (optional): the fork holds the live rows up to N."""
    session_id = session.id
    if q.is_retracted(state.store, session_id=session_id):
        raise ApiError(409, "a retracted session cannot be forked", code="session_retracted")
    message_id = await _fork_point(request)
    try:
        forked = _service(state).fork(session, message_id=message_id)
    except ForkPointMissing:
        raise ApiError(
            400,
            f"message {message_id} is not a live message of session '{session_id}'",
            param="message_id",
            code="message_not_found",
        ) from None
    except ProfileGone:
        raise ApiError(
            409, "the session's profile is no longer configured", code="profile_gone"
        ) from None
    created = q.session_summary(state.store, session_id=forked.session_id)
    assert created is not None
    return {
        **session_json(state, created),
        "forked_from": {"session_id": session_id, "message_id": message_id},
        "messages": forked.messages,
        "workspace_copied": forked.workspace_copied,
    }


async def _fork_point(request: Request) -> int | None:
    raw = await request.body()
    if not raw.strip():
        return None
    body = load_json_object(raw)  # every failure a 400, deep nesting too
    value = body.get("message_id")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, "message_id must be a positive integer", param="message_id")
    return value


@router.delete("/v1/sessions/{session_id}")
async def delete_session(
    session: ChatSession,
    state: StateDep,
    principal: PrincipalDep,
    purge: bool = False,
) -> dict[str, Any]:
    """Retract (hidden, nothing deleted); `?purge=true` with the admin scope hard-deletes
    the transcript, keeping the usage ledger that spend caps count."""
    if purge and not principal.admin:
        raise ApiError(403, "purge needs the 'admin' scope", code="insufficient_scope")
    try:
        _service(state).retract(session, purge=purge)
    except SessionBusy:
        raise ApiError(409, "a turn is running on this session", code="session_busy") from None
    return {
        "id": session.id,
        "object": "courier.session.deleted",
        "deleted": True,
        "purged": purge,
    }


@router.get("/v1/sessions/{session_id}/cost")
async def session_cost(summary: ReadSummary, state: StateDep) -> dict[str, Any]:
    pricer = profile_pricer(state.profiles.by_name)
    report = await asyncio.to_thread(cost_report, summary.calls, pricer)
    return {"object": "courier.session_cost", "session_id": summary.session.id, **report.as_json()}


@router.get("/v1/sessions/{session_id}/usage")
async def session_usage(
    session: ReadSession,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    session_id = session.id
    rows, total = state.store.api_calls(session_id=session_id, limit=limit, offset=offset)
    prompt = session.input_tokens + session.cache_read_tokens + session.cache_write_tokens
    return {
        "object": "courier.session_usage",
        "session_id": session_id,
        "totals": {
            "prompt_tokens": prompt,
            "completion_tokens": session.output_tokens,
            "input_tokens": session.input_tokens,
            "output_tokens": session.output_tokens,
            "cache_read_tokens": session.cache_read_tokens,
            "cache_write_tokens": session.cache_write_tokens,
            "reasoning_tokens": session.reasoning_tokens,
            "upstream_calls": session.upstream_calls,
            # A partial sum is not a cost: any unpriced call makes the total unknown.
            "cost_usd": session.cost_usd if session.cost_unknown_calls == 0 else None,
            "known_cost_usd": session.cost_usd,
            "unpriced_calls": session.cost_unknown_calls,
        },
        "calls": [
            {
                "id": r.id,
                "turn_id": r.turn_id,
                "created_at": r.created_at,
                "profile": r.profile,
                "upstream_model": r.upstream_model,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "cache_read_tokens": r.cache_read_tokens,
                "cache_write_tokens": r.cache_write_tokens,
                "reasoning_tokens": r.reasoning_tokens,
                "cost_usd": r.cost_usd,
                "cost_status": r.cost_status,
                "cost_source": r.cost_source,
                "latency_ms": round(r.latency_ms, 3),
                "ttft_ms": round(r.ttft_ms, 3) if r.ttft_ms is not None else None,
                "outcome": r.outcome,
                "cache_break": r.cache_break,
            }
            for r in rows
        ],
        "total_calls": total,
        "limit": limit,
        "offset": offset,
        "has_more": offset + len(rows) < total,
    }
