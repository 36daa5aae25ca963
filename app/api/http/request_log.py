"""Request ids and one access line per request, as a plain ASGI middleware.

Pure ASGI rather than Starlette's BaseHTTPMiddleware: that one buffers nothing but runs the
app in a separate task, which would cut the context variables (request id) off from the
handlers and break SSE disconnect detection. The access line carries the path without its
query string: `/v1/sessions/search?q=...` would otherwise write a user's search into the log.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from app.observe import logs

log = logging.getLogger("courier.access")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
"""A client-sent X-Request-Id is kept only when it is this tame; anything else (a newline, a
megabyte) is replaced rather than echoed into the log and the response."""


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or [])
        client_id = sent.get(b"x-request-id", b"").decode("latin-1")
        rid = client_id if _CLIENT_ID.fullmatch(client_id) else "req_" + secrets.token_hex(8)
        token = logs.request_id.set(rid)
        started = time.monotonic()
        status = 0
        session = None

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status, session
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers") or [])
                for name, value in headers:
                    if name.lower() == b"x-session-id":
                        session = value.decode("latin-1")
                headers.append((b"x-request-id", rid.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if session is not None:
                logs.session_id.set(session)
            log.info(
                "%s %s %s",
                scope.get("method", ""),
                scope.get("path", ""),
                status,
                extra={
                    "method": scope.get("method", ""),
                    "path": scope.get("path", ""),
                    "status": status,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                },
            )
            logs.session_id.set(None)
            logs.request_id.reset(token)
