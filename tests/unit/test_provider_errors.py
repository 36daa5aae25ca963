"""The shared error classifier: status + body + headers -> one ProviderError kind."""

from __future__ import annotations

import json
from email.utils import formatdate

import pytest

from app.providers.base import ErrorKind
from app.providers.errors import (
    RETRY_AFTER_CAP,
    classify_http_error,
    classify_stream_error,
    parse_retry_after,
)


def _openai(message: str, code: str | None = None, kind: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}})


def _anthropic(kind: str, message: str) -> str:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}})


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, _openai("Rate limit reached", "rate_limit_exceeded"), "rate_limited"),
        (429, _openai("You exceeded your current quota", "insufficient_quota"), "auth"),
        (529, _anthropic("overloaded_error", "Overloaded"), "overloaded"),
        (500, _anthropic("overloaded_error", "Overloaded"), "overloaded"),
        (503, _openai("The engine is currently overloaded"), "overloaded"),
        (500, _anthropic("api_error", "Internal server error"), "server_error"),
        (502, "<html>Bad Gateway</html>", "server_error"),
        (
            400,
            _anthropic(
                "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            ),
            "context_overflow",
        ),
        (
            400,
            _openai(
                "This model's maximum context length is 8192 tokens", "context_length_exceeded"
            ),
            "context_overflow",
        ),
        (
            400,
            json.dumps({"error": {"type": "exceed_context_size_error", "message": "x"}}),
            "context_overflow",
        ),
        (
            413,
            _anthropic("request_too_large", "Request exceeds the maximum size"),
            "context_overflow",
        ),
        (
            400,
            _openai("Flagged by our content_policy", "content_policy_violation"),
            "content_policy",
        ),
        (400, _openai("Unknown parameter: 'foo'"), "bad_request"),
        (422, json.dumps({"detail": [{"msg": "field required"}]}), "bad_request"),
        (401, _anthropic("authentication_error", "invalid x-api-key"), "auth"),
        (403, _anthropic("permission_error", "nope"), "auth"),
        (404, json.dumps({"error": 'model "llama9" not found, try pulling it first'}), "not_found"),
        (408, "", "server_error"),
    ],
)
def test_classification(status: int, body: str, kind: ErrorKind) -> None:
    error = classify_http_error(status, body, {})
    assert (error.kind, error.status) == (kind, status)


def test_retryable_flags_follow_the_kind() -> None:
    assert classify_http_error(429, "", {}).retryable
    assert classify_http_error(529, "", {}).retryable
    assert classify_http_error(500, "", {}).retryable
    for status in (400, 401, 404):
        assert not classify_http_error(status, "", {}).retryable
    assert classify_http_error(413, "", {}).should_compress


def test_retry_after_seconds_date_ms_and_cap() -> None:
    assert classify_http_error(429, "", {"Retry-After": "7"}).retry_after == 7.0
    assert classify_http_error(429, "", {"retry-after-ms": "1500"}).retry_after == 1.5
    assert classify_http_error(429, "", {"retry-after": "86400"}).retry_after == RETRY_AFTER_CAP
    assert classify_http_error(429, "", {}).retry_after is None
    assert classify_http_error(429, "", {"retry-after": "soon"}).retry_after is None
    now = 1_700_000_000.0
    date = formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0.0


def test_message_never_carries_the_key() -> None:
    key = "sk-proj-SECRETSECRET123"
    body = _openai(f"Incorrect API key provided: {key}", "invalid_api_key")
    error = classify_http_error(401, body, {}, secret=key)
    assert key not in error.message and "SECRET" not in error.message
    assert error.message.startswith("upstream returned 401 (auth)")
    # Key-shaped text is masked even when the classifier was not told the key.
    assert (
        "sk-live-abcdefgh" not in classify_http_error(401, "bad key sk-live-abcdefgh", {}).message
    )
    # And a custom key that looks like nothing in particular is masked when given.
    assert (
        "hunter2-local"
        not in classify_http_error(401, "key hunter2-local", {}, secret="hunter2-local").message
    )


def test_long_bodies_are_truncated() -> None:
    assert len(classify_http_error(400, "x" * 10_000, {}).message) < 600


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "overloaded",
        ),
        ({"error": {"code": 429, "message": "Provider returned error"}}, "rate_limited"),
        ({"error": {"message": "This model's maximum context length is 4096"}}, "context_overflow"),
        ({"error": {"message": "something broke"}}, "server_error"),
    ],
)
def test_in_stream_errors(payload: object, kind: ErrorKind) -> None:
    error = classify_stream_error(payload)
    assert error.kind == kind
    assert error.status is None
