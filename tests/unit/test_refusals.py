"""Every refusal and turn error the agent names has one HTTP status (app/api/http/statuses.py)."""

from __future__ import annotations

import pytest

from app.agent.events import TurnError
from app.agent.refusals import (
    IdempotencyKeyReused,
    PrefillUnsupported,
    ProfileGone,
    Refused,
    SessionBusy,
    SessionNotFound,
    SpendRefused,
    TurnCancelled,
    UnknownModel,
    UnknownToolCall,
    UnknownToolChoice,
)
from app.api.http.statuses import api_error, turn_error_status

SPEND = TurnError(message="cap reached", type="insufficient_quota", code="spend_limit_reached")


@pytest.mark.parametrize(
    ("refused", "status", "code", "param"),
    [
        (UnknownModel("gpt-9"), 404, "model_not_found", "model"),
        (SessionNotFound("sess_x"), 404, "session_not_found", "session_id"),
        (ProfileGone("old"), 409, "profile_gone", None),
        (SessionBusy("sess_x"), 409, "session_busy", None),
        (IdempotencyKeyReused(), 409, "idempotency_key_reused", "Idempotency-Key"),
        (TurnCancelled(), 409, "turn_cancelled", "Idempotency-Key"),
        (
            UnknownToolCall("call_1", param="messages[2].tool_call_id"),
            400,
            "unknown_tool_call",
            "messages[2].tool_call_id",
        ),
        (UnknownToolChoice("nope"), 400, "invalid_tool_choice", "tool_choice"),
        (PrefillUnsupported(param="messages[1]"), 400, "prefill_unsupported", "messages[1]"),
        (SpendRefused(SPEND), 402, "spend_limit_reached", None),
    ],
)
def test_each_refusal_has_its_status(
    refused: Refused, status: int, code: str, param: str | None
) -> None:
    error = api_error(refused)
    assert (error.status, error.code, error.param) == (status, code, param)
    assert error.body()["error"]["message"] == refused.message


def test_a_busy_session_says_when_to_retry_and_which_session() -> None:
    headers = api_error(SessionBusy("sess_abc")).headers
    assert headers == {"Retry-After": "1", "X-Session-Id": "sess_abc"}
    assert api_error(TurnCancelled()).headers == {"x-should-retry": "false"}
    assert api_error(SpendRefused(SPEND)).type == "insufficient_quota"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("upstream_rate_limited", 429),
        ("upstream_overloaded", 503),
        ("upstream_auth", 403),
        ("upstream_context_overflow", 400),
        ("upstream_server_error", 502),
        ("session_busy", 409),
        ("spend_limit_unpriced", 402),
        ("persistence_failed", 500),
        ("internal_error", 500),
        ("invalid_output", 502),
        ("empty_reply", 502),
    ],
)
def test_each_turn_error_has_its_status(code: str, status: int) -> None:
    assert turn_error_status(TurnError(message="m", type="t", code=code)) == status
