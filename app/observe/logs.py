"""Log setup: plain text for a terminal, or one JSON object per line for a log pipeline.

`COURIER_LOG_FORMAT=json` gives every record the request, session and turn it belongs to
(from context variables, so no call site has to pass them), and nothing else from the
request: no prompt, no tool argument, no key. Free-form fields would invite exactly that,
so the formatter writes a fixed set of keys.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Literal

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "courier_request_id", default=None
)
session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "courier_session_id", default=None
)
turn_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "courier_turn_id", default=None
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def bind_turn(*, session: str, turn: str) -> None:
    """Tag every record logged from here on in this task (a turn's own task) with its ids.

    A task runs in a copy of its creator's context, so this never leaks into the request
    that started the turn or into another turn.
    """
    session_id.set(session)
    turn_id.set(turn)


class JsonFormatter(logging.Formatter):
    """One line per record: ts, level, logger, msg, the ids that are set, and exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, var in (("request_id", request_id), ("session_id", session_id)):
            if (value := var.get()) is not None:
                entry[key] = value
        if (value := turn_id.get()) is not None:
            entry["turn_id"] = value
        for key in ("method", "path", "status", "duration_ms"):
            if hasattr(record, key):  # the access line's fields (api/http/request_log.py)
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: str, fmt: Literal["text", "json"]) -> None:
    """Install one stderr handler on the root logger (uvicorn's loggers propagate to it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
