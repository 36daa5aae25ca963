"""Failure hints: each status and each adapter's phrase table feed the hints the fallback
chain reads (the chain itself, over HTTP against the simulator, is in tests/e2e/)."""

from __future__ import annotations

import json

import pytest

from app.providers import anthropic as anthropic_wire
from app.providers import openai_chat
from app.providers.errors import classify_http_error


def _body(message: str, kind: str = "invalid_request_error") -> str:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}})


def test_adapter_phrase_tables_feed_the_hints() -> None:
    credit = _body("Your credit balance is too low to access the Anthropic API.")
    # To the generic rules a plain 400 is the client's fault: give up.
    generic = classify_http_error(400, credit, {})
    assert generic.kind == "bad_request" and generic.give_up and not generic.should_fall_back
    # The Anthropic adapter knows better: another key or route would serve it.
    named = classify_http_error(400, credit, {}, phrases=anthropic_wire.PHRASES)
    assert named.kind == "auth"
    assert named.should_rotate and named.should_fall_back and not named.retryable
    quota = json.dumps({"error": {"message": "quota", "code": "insufficient_quota"}})
    exhausted = classify_http_error(429, quota, {}, phrases=openai_chat.PHRASES)
    assert exhausted.kind == "auth" and not exhausted.retryable and exhausted.should_rotate


@pytest.mark.parametrize(
    ("status", "retry", "compress", "rotate", "fall_back", "give_up"),
    [
        (429, True, False, True, True, False),
        (529, True, False, False, True, False),
        (500, True, False, False, True, False),
        (401, False, False, True, True, False),
        (404, False, False, False, True, False),
        (413, False, True, False, False, False),
        (400, False, False, False, False, True),
    ],
)
def test_hints_by_status(
    status: int, retry: bool, compress: bool, rotate: bool, fall_back: bool, give_up: bool
) -> None:
    error = classify_http_error(status, "", {})
    hints = (
        error.retryable,
        error.should_compress,
        error.should_rotate,
        error.should_fall_back,
        error.give_up,
    )
    assert hints == (retry, compress, rotate, fall_back, give_up)
