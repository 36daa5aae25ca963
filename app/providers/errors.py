"""One classifier that turns an upstream failure into a `ProviderError` kind.

Both adapters route every HTTP status (and every error that arrives inside a 200 stream)
through here, so "is this retryable, should we compress" is decided in one place and the
loop reads booleans instead of re-parsing provider bodies.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from app.providers.base import ErrorKind, ProviderError

PhraseTable = tuple[tuple[str, ErrorKind], ...]
"""(lower-case phrase, kind) pairs an adapter knows its upstream says; the first phrase
found in an error body wins over the generic status rules. Each wire names faults its own
way (Anthropic's exhausted credit is a plain 400), so only the adapter knows them."""

RETRY_AFTER_CAP = 600.0
"""Seconds. A hostile or buggy upstream must not park a turn for hours."""

_MESSAGE_LIMIT = 500
"""Upstream bodies can echo the whole prompt back; keep errors (and logs) short."""

_CONTEXT_OVERFLOW_MARKERS = (
    "context length",
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "context window",
    "exceed_context_size",
    "exceeds the available context",
)

_CONTENT_POLICY_MARKERS = (
    "content_policy",
    "content policy",
    "content_filter",
    "content filter",
    "content management policy",
    "responsible ai policy",
)

# Errors inside a 200 stream carry no status; their type (Anthropic) or code (OpenAI) names
# the fault, so it stands in for the status a non-streamed reply would have had.
_STATUS_FOR_ERROR_NAME = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "overloaded": 529,
    "context_length_exceeded": 400,
    "content_policy_violation": 400,
    "invalid_api_key": 401,
    "model_not_found": 404,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

# Things shaped like credentials (OpenAI/Anthropic/OpenRouter keys, bearer tokens) that an
# upstream might echo back in an auth error; they must never reach a log line or a client.
_SECRET_PATTERN = re.compile(r"(sk-[A-Za-z0-9_\-*]{6,}|Bearer\s+[A-Za-z0-9._\-~+/=*]{6,})")


def redact(text: str, secret: str | None = None) -> str:
    """Mask the configured key (exactly) and anything key-shaped in `text`."""
    # Below 8 characters a "key" is a placeholder such as "ollama"; replacing it everywhere
    # would garble ordinary words in the message and protect nothing.
    if secret and len(secret) >= 8:
        text = text.replace(secret, "[redacted]")
    return _SECRET_PATTERN.sub("[redacted]", text)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, `retry-after` (seconds or HTTP date); capped."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return _cap(float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return _cap(float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return _cap(when.timestamp() - current)


def _cap(seconds: float) -> float | None:
    # NaN and infinities are as meaningless as a garbled header: treat them as absent.
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


def _error_fields(body: Any) -> tuple[str, str, str]:
    """(type, code, message) from the common error body shapes, empty strings if absent."""
    if not isinstance(body, dict):
        return "", "", ""
    error = body.get("error", body)
    if isinstance(error, str):
        # Ollama and llama.cpp's older servers: {"error": "text"}.
        return "", "", error
    if not isinstance(error, dict):
        return "", "", ""
    message = error.get("message") or body.get("detail") or body.get("message") or ""
    return (
        str(error.get("type") or ""),
        str(error.get("code") or ""),
        message if isinstance(message, str) else json.dumps(message),
    )


def _kind_for(status: int, error_type: str, code: str, text: str) -> ErrorKind:
    lowered = text.lower()
    if status == 529 or "overloaded" in (error_type, code) or error_type == "overloaded_error":
        return "overloaded"
    if status == 429:
        # OpenAI reports an exhausted billing quota as 429; retrying cannot fix it, so it is a
        # credential problem (rotate or stop), not throttling.
        return "auth" if code == "insufficient_quota" else "rate_limited"
    if status == 413:
        # A request too large in bytes is fixed by the same remedy as a token overflow.
        return "context_overflow"
    if status in (400, 422) and any(m in lowered for m in _CONTEXT_OVERFLOW_MARKERS):
        return "context_overflow"
    if 400 <= status < 500 and any(m in lowered for m in _CONTENT_POLICY_MARKERS):
        return "content_policy"
    if status == 503 and "overloaded" in lowered:
        return "overloaded"
    if status >= 500:
        return "server_error"
    if status in (401, 402, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status in (408, 409):
        # Request timeout and conflict are transient; the Anthropic and OpenAI SDKs retry them.
        return "server_error"
    return "bad_request"


def classify_http_error(
    status: int,
    body_text: str,
    headers: Mapping[str, str],
    *,
    secret: str | None = None,
    phrases: PhraseTable = (),
) -> ProviderError:
    """Classify a non-2xx upstream response. `secret` (the upstream key) is masked out."""
    try:
        body: Any = json.loads(body_text) if body_text else None
    except ValueError:
        body = None
    error_type, code, message = _error_fields(body)
    lowered = body_text.lower()
    named = next((kind for phrase, kind in phrases if phrase in lowered), None)
    kind = named or _kind_for(status, error_type, code, body_text)
    detail = redact((message or body_text).strip()[:_MESSAGE_LIMIT], secret)
    text = f"upstream returned {status} ({kind})" + (f": {detail}" if detail else "")
    return ProviderError(kind, text, status=status, retry_after=parse_retry_after(headers))


def classify_stream_error(
    payload: Any, *, secret: str | None = None, phrases: PhraseTable = ()
) -> ProviderError:
    """Classify an error frame that arrived inside a 200 stream (OpenRouter, Anthropic).

    There is no HTTP status, so one is inferred: a numeric `code` (OpenRouter), else the
    OpenAI code or Anthropic error type, else 400 when the text names a context overflow,
    else 500 so an unexplained mid-stream failure counts as a transient server fault.
    """
    error_type, code, _ = _error_fields(payload)
    body_text = json.dumps(payload) if not isinstance(payload, str) else payload
    status = int(code) if code.isdigit() and 400 <= int(code) < 600 else 0
    if not status:
        status = _STATUS_FOR_ERROR_NAME.get(code) or _STATUS_FOR_ERROR_NAME.get(error_type, 0)
    if not status:
        lowered = body_text.lower()
        overflow = any(m in lowered for m in _CONTEXT_OVERFLOW_MARKERS)
        status = 400 if overflow else 500
    error = classify_http_error(status, body_text, {}, secret=secret, phrases=phrases)
    # The status was inferred, not received; don't report it as if the upstream sent it.
    error.status = None
    return error
