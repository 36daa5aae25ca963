"""CORS for browser clients: an explicit origin allowlist, off by default.

Starlette's CORSMiddleware lets a request from a disallowed origin run and only withholds
the headers, so a browser page on any site could still make a logged-in cockpit's
requests have side effects (the browser merely hides the answer). Here a request whose
`Origin` is not allowed is refused with 403 before it reaches a route. Same-origin
requests (the console served by Courier itself) always pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALLOWED_METHODS = "GET, HEAD, POST, DELETE, OPTIONS"
ALLOWED_HEADERS = (
    "Authorization, Content-Type, X-Session-Id, Idempotency-Key, X-Courier-Events, "
    "X-Courier-Busy, X-Courier-On-Disconnect"
)
EXPOSED_HEADERS = (
    "X-Session-Id, X-Courier-Cost-USD, X-Courier-Upstream-Calls, X-Courier-Ignored, "
    "Retry-After, x-should-retry"
)
MAX_AGE_S = "600"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _same_origin(scope: Scope, origin: str) -> bool:
    host = _header(scope, b"host")
    if host is None:
        return False
    return origin in (f"http://{host}", f"https://{host}")


class CorsMiddleware:
    def __init__(self, app: ASGIApp, *, origins: Iterable[str]) -> None:
        self.app = app
        self.origins = frozenset(origins)
        self.any = "*" in self.origins

    def allowed(self, origin: str) -> bool:
        return self.any or origin in self.origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = _header(scope, b"origin")
        if origin is None or _same_origin(scope, origin) or not self.origins:
            await self.app(scope, receive, send)
            return
        if not self.allowed(origin):
            await _refuse(send, f"origin '{origin}' is not allowed (COURIER_CORS_ORIGINS)")
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [
                        *cors,
                        (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
                        (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                        (b"access-control-max-age", MAX_AGE_S.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [*cors, (b"access-control-expose-headers", EXPOSED_HEADERS.encode())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_cors)


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "permission_error",
                "param": None,
                "code": "origin_not_allowed",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
