"""GET /v1/sessions/{id}/usage: the per-call ledger and the session's totals."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.protocol.errors import ApiError
from app.routes.deps import PrincipalDep, StateDep

router = APIRouter()


@router.get("/v1/sessions/{session_id}/usage")
async def session_usage(
    session_id: str,
    state: StateDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    session = state.store.get_session(session_id=session_id)
    # Another key's session answers exactly like a missing one: no existence oracle.
    if session is None or (session.owner != principal.owner and not principal.admin):
        raise ApiError(404, f"session '{session_id}' not found", code="session_not_found")
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
