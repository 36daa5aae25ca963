"""The HTTP status of everything the agent names: refusals before a turn, and the errors a
turn ends with.

The agent says what happened (`session_busy`, `spend_limit_reached`, `upstream_auth`); the
status is chosen here, once, so the chat and Responses front doors cannot drift apart.
"""

from __future__ import annotations

from app.agent.events import TurnError
from app.agent.refusals import (
    IdempotencyKeyReused,
    ProfileGone,
    Refused,
    SessionBusy,
    SessionNotFound,
    SpendRefused,
    TurnCancelled,
    UnknownModel,
)
from app.api.http.errors import ApiError

# What an upstream failure means to the client: an upstream key or request the provider
# refuses is not a server fault a retry could fix, so it must not be a 5xx every SDK retries.
_UPSTREAM_STATUS = {
    "rate_limited": 429,
    "overloaded": 503,
    "context_overflow": 400,
    "content_policy": 400,
    "bad_request": 400,
    "not_found": 400,
    "auth": 403,
    "timeout": 504,
}
_TURN_STATUS = {
    "session_busy": 409,
    "spend_limit_reached": 402,
    "spend_limit_unpriced": 402,
    "persistence_failed": 500,
    "internal_error": 500,
    # What the conversation holds (a client's message, a tool's output) makes every retry
    # carry the same secret: a client error, never a 5xx an SDK would retry.
    "secret_in_request": 400,
}
UPSTREAM_PREFIX = "upstream_"


def turn_error_status(error: TurnError) -> int:
    """The status a turn's error is answered with (502 for what the upstream got wrong)."""
    if error.code.startswith(UPSTREAM_PREFIX):
        return _UPSTREAM_STATUS.get(error.code.removeprefix(UPSTREAM_PREFIX), 502)
    return _TURN_STATUS.get(error.code, 502)


def _refusal_status(refused: Refused) -> int:
    if isinstance(refused, UnknownModel | SessionNotFound):
        return 404
    if isinstance(refused, SessionBusy | ProfileGone | IdempotencyKeyReused | TurnCancelled):
        return 409
    if isinstance(refused, SpendRefused):
        return turn_error_status(refused.error)
    return 400


def api_error(refused: Refused) -> ApiError:
    """The OpenAI-shaped error for a refusal, with the headers its retry needs."""
    headers: dict[str, str] = {}
    type_: str | None = None
    if isinstance(refused, SessionBusy):
        headers = {"Retry-After": "1", "X-Session-Id": refused.session_id}
    elif isinstance(refused, TurnCancelled):
        headers = {"x-should-retry": "false"}
    elif isinstance(refused, SpendRefused):
        type_ = refused.error.type
    return ApiError(
        _refusal_status(refused),
        refused.message,
        param=refused.param,
        code=refused.code,
        type_=type_,
        headers=headers,
    )


def storage_unavailable() -> ApiError:
    """The database would not take the turn's first write (locked past the busy timeout,
    a full disk): nothing was stored, so the same request may simply be sent again."""
    return ApiError(
        503,
        "the server could not store this request right now; nothing was run, retry shortly",
        code="storage_unavailable",
        type_="server_error",
        headers={"Retry-After": "1", "x-should-retry": "true"},
    )
