"""POST /v1/tokens: mint a short-lived token for a client that must not hold the key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.http.body_limits import load_json_object
from app.api.http.deps import MinterDep, StateDep, read_limited_body
from app.api.http.end_users import end_user_header
from app.api.http.errors import ApiError
from app.api.http.owned import session_not_found, visible_session
from app.security.minted_tokens import DEFAULT_TTL_S, TokenRefused

router = APIRouter()


@router.post("/v1/tokens")
async def mint_token(request: Request, state: StateDep, principal: MinterDep) -> dict[str, Any]:
    issuer = state.auth.tokens
    if issuer is None:
        raise ApiError(404, "tokens are not enabled on this server", code="tokens_disabled")
    body = await read_limited_body(request, 16 * 1024)
    data = load_json_object(body or b"{}")  # every failure a 400, deep nesting too
    scopes = data.get("scopes")
    ttl = data.get("ttl_s", DEFAULT_TTL_S)
    session_id = data.get("session_id")
    if scopes is not None and (
        not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes)
    ):
        raise ApiError(400, "scopes must be a list of strings", param="scopes")
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        raise ApiError(400, "ttl_s must be an integer", param="ttl_s")
    if session_id is not None:
        if not isinstance(session_id, str):
            raise session_not_found(str(session_id))
        # The key's own, or the admin's; of the end user the headers name, if they name one.
        visible_session(
            state, principal, session_id, end_user_header(request.headers, state.settings)
        )
    try:
        minted = issuer.mint(principal, scopes=scopes, ttl_s=ttl, session_id=session_id)
    except TokenRefused as exc:
        status = 403 if "lacks" in str(exc) or "cannot mint" in str(exc) else 400
        raise ApiError(status, str(exc), code="token_refused") from None
    return {
        "object": "courier.token",
        "token": minted.token,
        "token_type": "bearer",
        "expires_at": minted.expires_at,
        "scopes": list(minted.scopes),
        "session_id": minted.session_id,
    }
