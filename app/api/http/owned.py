"""What a route names (a session, or a response, approval or grant that lives in one),
resolved for the request's principal and end user in one place.

A route that takes such an id in its path gets the row through one of the aliases below,
never by looking the id up itself: the session rule (`Principal.may_see`: a token's
binding first, then owner or admin) and the end user the request's headers name (a
session of another end user of the key is none of this request's) are applied here, so a
new route cannot forget them, and `tests/test_bindings.py` fails on a route whose id does
not resolve through one of these. Whatever the request may not see answers exactly like a
missing id: ids cannot be probed, and a token bound to one session, or a request for one
end user, cannot tell another session from none.

These look rows up in SQLite, yet are `async def`, as the routes that did it inline were:
a plain `def` dependency costs a thread hop for a read of a millisecond.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.agent.refusals import SessionNotFound
from app.api.http.deps import ApproverDep, PrincipalDep, ReaderDep, StateDep
from app.api.http.end_users import end_user_header
from app.api.http.errors import ApiError
from app.api.http.statuses import api_error
from app.api.state import AppState
from app.db import session_query as q
from app.db.approval_models import ApprovalRow, GrantRow
from app.db.models import SessionRow
from app.db.session_models import ResponseRow
from app.db.store import Store
from app.security.principal import Principal


def session_not_found(session_id: str) -> ApiError:
    return ApiError(404, f"session '{session_id}' not found", code="session_not_found")


def visible_response(
    store: Store,
    principal: Principal,
    response_id: str,
    *,
    param: str | None = None,
    end_user: str | None = None,
) -> ResponseRow:
    """The stored response if the principal (acting for `end_user`, if named) may see it,
    else a 404 naming `param` (where the request named the id, if in its body)."""
    row = q.get_response(store, response_id=response_id)
    # Another key's response, another session's for a bound token, or another end user's
    # for a request that names one, answers exactly like a missing one.
    if (
        row is None
        or row.retracted
        or not principal.may_see(session_id=row.session_id, owner=row.owner)
        or not _of_end_user(store, row.session_id, end_user)
    ):
        raise ApiError(
            404, f"response '{response_id}' not found", param=param, code="response_not_found"
        )
    return row


async def named_end_user(request: Request, state: StateDep) -> str | None:
    """The end user the request's headers name (None: the app itself, its key's reach).
    Only headers: these routes have no `user` field, and a query parameter naming one
    would let the caller pick whom it acts for."""
    return end_user_header(request.headers, state.settings)


EndUserDep = Annotated[str | None, Depends(named_end_user)]


def _may_see(
    principal: Principal, end_user: str | None, session: SessionRow, *, retracted: bool
) -> bool:
    """The principal's session rule, narrowed to the end user the request names."""
    return principal.may_see(session_id=session.id, owner=session.owner, retracted=retracted) and (
        end_user is None or session.end_user == end_user
    )


def _of_end_user(store: Store, session_id: str | None, end_user: str | None) -> bool:
    """Whether what lives in `session_id` is within the end user the request names (all
    is, when it names none; so is what lives in no session: an `always` grant)."""
    if end_user is None or session_id is None:
        return True
    session = store.get_session(session_id=session_id)
    return session is not None and session.end_user == end_user


def visible_session(
    state: AppState, principal: Principal, session_id: str, end_user: str | None = None
) -> SessionRow:
    """The session if the principal (acting for `end_user`, if named) may see it, else the
    404 of a missing one."""
    session = state.store.get_session(session_id=session_id)
    if session is None or not _may_see(
        principal,
        end_user,
        session,
        retracted=q.is_retracted(state.store, session_id=session_id),
    ):
        raise session_not_found(session_id)
    return session


def visible_summary(
    state: AppState, principal: Principal, session_id: str, end_user: str | None = None
) -> q.SessionSummary | None:
    """The session with its totals, in one read, if the principal may see it."""
    summary = q.session_summary(state.store, session_id=session_id)
    if summary is None or not _may_see(
        principal, end_user, summary.session, retracted=summary.retracted
    ):
        return None
    return summary


def check_binding(principal: Principal, session_id: str | None) -> None:
    """A turn request's session against the token's binding: another session is the 404 the
    lifecycle gives a missing one; naming none is refused, not pinned to the bound session
    (a request without a session means a new one, which the token may not start)."""
    if principal.session_id is None:
        return
    if session_id is None:
        raise ApiError(
            403,
            "this token is bound to one session; send its id in X-Session-Id",
            code="token_session_mismatch",
        )
    if session_id != principal.session_id:
        raise api_error(SessionNotFound(session_id))


async def chat_session(
    session_id: str, state: StateDep, principal: PrincipalDep, end_user: EndUserDep
) -> SessionRow:
    return visible_session(state, principal, session_id, end_user)


async def read_session(
    session_id: str, state: StateDep, principal: ReaderDep, end_user: EndUserDep
) -> SessionRow:
    return visible_session(state, principal, session_id, end_user)


async def read_summary(
    session_id: str, state: StateDep, principal: ReaderDep, end_user: EndUserDep
) -> q.SessionSummary:
    summary = visible_summary(state, principal, session_id, end_user)
    if summary is None:
        raise session_not_found(session_id)
    return summary


async def reachable_response(
    response_id: str, state: StateDep, principal: PrincipalDep, end_user: EndUserDep
) -> ResponseRow:
    return visible_response(state.store, principal, response_id, end_user=end_user)


async def reachable_approval(
    approval_id: str, state: StateDep, principal: ApproverDep, end_user: EndUserDep
) -> ApprovalRow:
    """Approvers see every key's approvals (they act for the operator); a token bound to
    one session sees that session's only, a request for one end user that end user's."""
    row = state.approvals.store.get(approval_id=approval_id)
    if (
        row is None
        or not principal.reaches(row.session_id)
        or not _of_end_user(state.store, row.session_id, end_user)
    ):
        raise ApiError(404, f"approval '{approval_id}' not found", code="approval_not_found")
    return row


async def reachable_grant(
    grant_id: str, state: StateDep, principal: ApproverDep, end_user: EndUserDep
) -> GrantRow:
    """A bound token reaches its session's grants, not `always` grants (they hold for every
    session) nor another session's; a request for one end user, not another end user's."""
    row = state.approvals.store.get_grant(grant_id=grant_id)
    if (
        row is None
        or not principal.reaches(row.session_id)
        or not _of_end_user(state.store, row.session_id, end_user)
    ):
        raise ApiError(404, f"grant '{grant_id}' not found", code="grant_not_found")
    return row


ChatSession = Annotated[SessionRow, Depends(chat_session)]
"""The session in the path, for a principal with the `chat` scope."""
ReadSession = Annotated[SessionRow, Depends(read_session)]
"""The session in the path, for a principal with the `sessions:read` scope."""
ReadSummary = Annotated[q.SessionSummary, Depends(read_summary)]
"""The same, with its totals (turns, calls, title) read in the same query."""
ReachableResponse = Annotated[ResponseRow, Depends(reachable_response)]
ReachableApproval = Annotated[ApprovalRow, Depends(reachable_approval)]
ReachableGrant = Annotated[GrantRow, Depends(reachable_grant)]
