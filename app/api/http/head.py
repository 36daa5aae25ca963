"""`HEAD` wherever `GET` exists: uptime probes and link checkers send it.

FastAPI registers GET routes for GET only, so a probe's HEAD got 405. Serving HEAD as
the GET with its body dropped keeps the status and headers (Content-Length included)
exactly those of the GET, for every route at once.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, send_headers_only)
