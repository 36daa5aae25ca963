"""DirectApp (app/api/http/direct.py) answers a direct route exactly as FastAPI's own way does:
the same statuses, headers and bodies for an answer, a handled error and an unhandled one,
through the same middleware. Checked against the same app with the short way left unused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.http.direct import DirectApp, DirectRoute


class Refused(Exception):
    pass


class Tagged:
    """A middleware that tags every response and counts the requests it saw."""

    seen = 0

    def __init__(self, app: ASGIApp, *, tag: str) -> None:
        self.app, self.tag = app, tag.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        Tagged.seen += 1

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-tag", self.tag)]
            await send(message)

        await self.app(scope, receive, tagged)


router = APIRouter(route_class=DirectRoute)


@router.post("/v1/turn")
async def turn(request: Request) -> Response:
    body = await request.body()
    if body == b"refuse":
        raise Refused("no")
    if body == b"crash":
        raise RuntimeError("boom")
    if body == b"plain":
        raise ValueError("no handler at all")
    return PlainTextResponse(f"echo {body.decode()} {request.app.title}", headers={"x-a": "1"})


async def _refused(_request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=409)


async def _crashed(_request: Request, _exc: Exception) -> Response:
    return JSONResponse({"error": "internal"}, status_code=500)


def _app(*, direct: bool) -> DirectApp:
    app = DirectApp(title="T", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(Refused, _refused)
    app.add_exception_handler(Exception, _crashed)
    app.include_router(router)
    app.add_middleware(Tagged, tag="t")
    if direct:
        app.serve_directly(router)
    return app


async def _ask(app: DirectApp, body: bytes) -> tuple[int, dict[str, Any], bytes]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        resp = await client.post("/v1/turn", content=body)
    return resp.status_code, dict(resp.headers), resp.content


@pytest.mark.parametrize("body", [b"hello", b"refuse", b"crash"])
async def test_the_short_way_answers_as_fastapi_does(body: bytes) -> None:
    Tagged.seen = 0
    short = await _ask(_app(direct=True), body)
    assert Tagged.seen == 1  # the app's own middleware ran on the short way too
    assert short == await _ask(_app(direct=False), body)
    # An unhandled error's 500 is answered outside the middleware, as Starlette answers it.
    assert short[1].get("x-tag") == (None if body == b"crash" else "t")


async def test_answers_and_errors_of_the_short_way() -> None:
    app = _app(direct=True)
    status, headers, content = await _ask(app, b"hello")
    assert (status, content, headers["x-a"]) == (200, b"echo hello T", "1")
    assert (await _ask(app, b"refuse"))[::2] == (409, b'{"error":"no"}')
    assert (await _ask(app, b"crash"))[::2] == (500, b'{"error":"internal"}')


async def test_an_unhandled_error_reaches_the_server() -> None:
    """The catch-all handler answers 500 and the exception still reaches the server (its
    log), as with Starlette's error middleware; a handled one does not."""
    for direct in (True, False):
        transport = httpx.ASGITransport(app=_app(direct=direct))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            with pytest.raises(RuntimeError, match="boom"):
                await client.post("/v1/turn", content=b"crash")
            assert (await client.post("/v1/turn", content=b"refuse")).status_code == 409


async def test_other_routes_and_methods_take_fastapi_s_way() -> None:
    app = _app(direct=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/v1/turn")).status_code == 405
        assert (await client.post("/v1/other")).status_code == 404
