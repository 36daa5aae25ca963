"""Approvals over HTTP: list what waits for a human, decide it, list and revoke grants.

Principals with the `approvals` scope act as the operator's approvers: they see every
pending approval (an approver who could only see their own would make
`approvals_separate_approver` impossible to satisfy). A token bound to one session sees,
decides and revokes only that session's (`app/api/http/owned.py`), and cannot make an
`always` grant, which would hold for every session.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from app.agent.approvals import (
    DECISIONS,
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalRefused,
    grant_fields,
    visible_fields,
)
from app.api.http.body_limits import load_json_object
from app.api.http.deps import ApproverDep, StateDep, read_limited_body
from app.api.http.errors import ApiError
from app.api.http.owned import ReachableApproval, ReachableGrant

router = APIRouter()

Status = Literal["pending", "approved", "denied", "expired", "cancelled", "abandoned"]


@router.get("/v1/approvals")
async def list_approvals(
    state: StateDep,
    principal: ApproverDep,
    status: Annotated[Status | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    rows = state.approvals.store.list(status=status, limit=limit, session_id=principal.session_id)
    return {"object": "list", "data": [visible_fields(r) for r in rows]}


@router.get("/v1/approvals/grants")
async def list_grants(
    state: StateDep,
    principal: ApproverDep,
    session_id: Annotated[str | None, Query()] = None,
) -> dict[str, Any]:
    # Another session named by a bound token lists like a session without grants.
    if session_id is not None and not principal.reaches(session_id):
        return {"object": "list", "data": []}
    rows = state.approvals.store.grants(session_id=principal.session_id or session_id)
    return {"object": "list", "data": [grant_fields(r) for r in rows]}


@router.delete("/v1/approvals/grants/{grant_id}")
async def revoke_grant(grant: ReachableGrant, state: StateDep) -> dict[str, Any]:
    if not state.approvals.store.delete_grant(grant_id=grant.id):
        raise ApiError(404, f"grant '{grant.id}' not found", code="grant_not_found")
    return {"id": grant.id, "object": "courier.approval_grant", "deleted": True}


@router.get("/v1/approvals/{approval_id}")
async def get_approval(row: ReachableApproval) -> dict[str, Any]:
    return visible_fields(row)


@router.post("/v1/approvals/{approval_id}")
async def decide(
    approval: ReachableApproval, request: Request, state: StateDep, principal: ApproverDep
) -> dict[str, Any]:
    approval_id = approval.id
    body = await read_limited_body(request, 16 * 1024)
    data = load_json_object(body or b"{}")  # every failure a 400, deep nesting too
    decision = data.get("decision")
    if decision not in DECISIONS:
        raise ApiError(
            400,
            f"decision must be one of {', '.join(DECISIONS)}",
            param="decision",
            code="invalid_decision",
        )
    if decision == "always" and principal.session_id is not None:
        raise ApiError(
            403,
            "this token is bound to one session: an 'always' grant would hold for every "
            "session; decide once, session or deny",
            code="approval_refused",
        )
    try:
        row, grant = state.approvals.decide(
            approval_id=approval_id, decision=decision, approver=principal.label
        )
    except ApprovalNotFound:
        raise ApiError(
            404, f"approval '{approval_id}' not found", code="approval_not_found"
        ) from None
    except ApprovalConflict as exc:
        raise ApiError(409, str(exc), code="approval_not_pending") from None
    except ApprovalRefused as exc:
        raise ApiError(403, str(exc), code="approval_refused") from None
    out = visible_fields(row)
    out["grant"] = grant_fields(grant) if grant is not None else None
    return out
