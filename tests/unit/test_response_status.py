"""How a turn's end reads on the Responses API (`status_of`, `response_error`).

A turn cut off by a drain or a dead process ends `interrupted` with no error of its own;
read as `completed`, a client (and a webhook) would take half an answer for a whole one.
"""

from __future__ import annotations

import pytest

from app.agent.events import TurnError, TurnFinished
from app.api.responses.render import response_error, status_of
from app.providers.pricing import Cost
from app.providers.usage import Usage


def _finished(exit_reason: str, finish_reason: str = "stop", **extra: object) -> TurnFinished:
    return TurnFinished(
        exit_reason,  # type: ignore[arg-type]
        finish_reason,  # type: ignore[arg-type]
        Usage(),
        Cost.zero(),
        1,
        **extra,  # type: ignore[arg-type]
    )


def test_an_interrupted_turn_is_failed_with_a_server_error() -> None:
    finished = _finished("interrupted")
    assert status_of(finished) == "failed"
    error = response_error(finished)
    assert error is not None
    assert error["code"] == "server_error"
    assert "interrupted" in error["message"]


@pytest.mark.parametrize(
    ("finished", "status"),
    [
        (_finished("completed"), "completed"),
        (_finished("cancelled"), "cancelled"),
        (_finished("completed", "length"), "incomplete"),
        (_finished("truncated", "length"), "incomplete"),
        (
            _finished("upstream_error", error=TurnError("boom", "server_error", "upstream")),
            "failed",
        ),
    ],
)
def test_other_ends_keep_their_status(finished: TurnFinished, status: str) -> None:
    assert status_of(finished) == status
