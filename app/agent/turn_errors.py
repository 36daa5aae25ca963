"""The errors a turn ends with, each worded in one place.

The loop and the relay end turns the same ways (an upstream failure, a request held back
for carrying a server secret); built here, a client reads the same message and code
whichever of them ran its turn. `app/api/http/statuses.py` gives each code its status.
"""

from __future__ import annotations

from app.agent.events import TurnError
from app.providers.base import ProviderError

MESSAGES = {
    "session_busy": "another turn took over this session",
    "persistence_failed": "the turn could not be saved; nothing further was run",
    "internal_error": "internal error",
    "invalid_output": "the model's answer did not match the requested response_format, "
    "also after one repair attempt",
}


def turn_error(code: str, type_: str = "server_error") -> TurnError:
    return TurnError(message=MESSAGES.get(code, code), type=type_, code=code)


def secret_error() -> TurnError:
    return TurnError(
        message="the request to the model carried one of the server's own credentials, so it "
        "was not sent; nothing in this conversation may repeat a server key",
        type="invalid_request_error",
        code="secret_in_request",
    )


def upstream_turn_error(exc: ProviderError, *, side_effects: bool = False) -> TurnError:
    """`side_effects`: a server-side tool ran this turn, so a blind retry would run it again
    and the error must not invite one."""
    return TurnError(
        message=f"upstream model call failed ({exc.kind})",
        type="upstream_error",
        code=f"upstream_{exc.kind}",
        retryable=exc.retryable and not side_effects,
        retry_after=exc.retry_after,
    )
