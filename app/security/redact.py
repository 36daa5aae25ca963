"""Redaction: keys, tokens and provider credentials never reach a log record or an error body.

Two layers. Known secrets (every configured key, the token secret, upstream keys) are
replaced wherever they appear; shapes that look like credentials (`Bearer ...`, JWTs,
`sk-...`, `password=...`) are replaced even when nobody configured them, because a
model or a client can paste one anywhere. The log filter is installed as the record
factory, so it sees every record of every logger (a handler filter would miss records
of loggers whose handlers are added later, uvicorn's among them). It fails closed: a
record that cannot be redacted is withheld, not written as it was.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Iterable
from typing import Any

MASK = "[redacted]"
WITHHELD = "[log record withheld: redaction failed]"
MIN_SECRET_CHARS = 8
"""Shorter configured values are not masked by value: masking `abc` everywhere would
shred ordinary text, and nothing that short is accepted as a key anyway."""

_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}"),
    re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat|xox[abposr]|glpat)[-_][A-Za-z0-9_-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(
        r"(?i)\b((?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|"
        r"pwd|aws_secret_access_key|client_secret)\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&,;]+)"
    ),
    re.compile(r"(?i)(--(?:password|passwd|token|api-key|secret)[= ])(\S+)"),
    re.compile(r"(?i)(\bx-api-key:\s*)(\S+)"),
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(
            {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
        )

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for pattern in _PATTERNS:
            text = pattern.sub(_mask_match, text)
        return text


def _mask_match(match: re.Match[str]) -> str:
    # Keep the label (`Bearer`, `password=`, `--token `) so a reader knows what was there.
    if match.re.groups == 0:
        return MASK
    if match.re.groups == 1:
        return f"{match.group(1)} {MASK}"
    return match.group(1) + MASK


_lock = threading.Lock()
_active = Redactor()
_installed = False


def redact_text(text: str) -> str:
    """Redact with the process's redactor; on failure return a mask, never the input."""
    try:
        return _active.redact(text)
    except Exception:
        return MASK


def _redact_arg(value: Any) -> Any:
    if isinstance(value, str):
        return _active.redact(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    # Other objects keep their type (so `%.2f` of a Decimal still formats) unless their
    # text shows a secret, in which case the redacted text stands in for them.
    text = str(value)
    redacted = _active.redact(text)
    return value if redacted == text else redacted


def _redact_record(record: logging.LogRecord) -> None:
    if isinstance(record.args, dict):
        record.args = {k: _redact_arg(v) for k, v in record.args.items()}
    elif isinstance(record.args, tuple):
        # Arguments stay a tuple: uvicorn's access formatter unpacks them by position.
        record.args = tuple(_redact_arg(a) for a in record.args)
    record.msg = _active.redact(str(record.msg))
    # Belt and braces: if the formatted text still shows a secret, flatten the record.
    message = record.getMessage()
    if _active.redact(message) != message:
        record.msg, record.args = _active.redact(message), ()
    if record.exc_info:
        text = "".join(traceback.format_exception(*record.exc_info))
        record.exc_text = _active.redact(text.rstrip("\n"))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = _active.redact(record.exc_text)
    if record.stack_info:
        record.stack_info = _active.redact(record.stack_info)


def install(secrets: Iterable[str]) -> None:
    """Make `secrets` (plus credential shapes) unloggable for the rest of the process."""
    global _active, _installed
    with _lock:
        _active = Redactor(secrets)
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                _redact_record(record)
            except Exception:
                record.msg, record.args = WITHHELD, ()
                record.exc_info, record.exc_text, record.stack_info = None, None, None
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
