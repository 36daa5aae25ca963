"""Routes whose endpoint takes the request and returns the response, nothing between.

FastAPI's request handler solves the endpoint's dependencies, binds its parameters and
validates its response on every call. Skipping it, with state and principal resolved in
the endpoint instead of through `Depends`, saved about 0.3 ms of CPU per new-session
request (two servers side by side, alternating blocks of benchmarks/hot_path.py's
request). The turn routes read, bound and parse their own bodies, so they need none of
it; they stay `APIRoute`s, so `/openapi.json` still lists them.

`DirectApp` goes one step further for them: see its docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class DirectRoute(APIRoute):
    """An `APIRoute` whose endpoint is `async def endpoint(request) -> Response`."""

    def get_route_handler(self) -> Endpoint:
        endpoint: Endpoint = self.endpoint
        return endpoint


class DirectApp(FastAPI):
    """FastAPI, with the requests of the direct routes it is told of taken straight to them.

    Between uvicorn and a route, Starlette and FastAPI run an error middleware, an exception
    middleware, an exit-stack middleware, the router's match over every route and a route
    wrapper, each with its own wrapper around every send: 4.7 % of a new-session request's
    instructions (callgrind, 7.47 -> 7.11 M). A request for a direct route (a turn) goes
    through the app's own middleware (security headers, CORS, HEAD, the access log) to its
    endpoint, whose exceptions the app's handlers answer as they would have; any other
    request, and every request of an app mounted under a root path, takes FastAPI's way."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct: dict[tuple[str, str], Endpoint] = {}
        self._direct_stack: ASGIApp | None = None

    def serve_directly(self, router: APIRouter) -> None:
        """Take `router`'s direct routes (those without path parameters) the short way."""
        for route in router.routes:
            if isinstance(route, DirectRoute) and not route.param_convertors:
                for method in route.methods or ():
                    self._direct[(method, route.path)] = route.get_route_handler()
        self._direct_stack = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and (scope["method"], scope["path"]) in self._direct
            and not self.root_path
        ):
            scope["app"] = self
            await self._direct_call(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _direct_call(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's middleware around the endpoint; outside them, as Starlette's error
        middleware does, an unhandled error's 500 (it does not pass through them) and the
        error itself re-raised for the server to log."""
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        stack = self._direct_stack or self._build_direct_stack()
        try:
            await stack(scope, receive, tracked)
        except Exception as exc:
            if not started:
                handler = self.exception_handlers.get(500) or self.exception_handlers.get(Exception)
                request = Request(scope, receive)
                response = (
                    await _answer(handler, request, exc)
                    if handler is not None
                    else PlainTextResponse("Internal Server Error", status_code=500)
                )
                await response(scope, receive, send)
            raise

    def _build_direct_stack(self) -> ASGIApp:
        # Built on first use, as Starlette builds its own: every middleware is added by then.
        app: ASGIApp = self._dispatch
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        self._direct_stack = app
        return app

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self._direct[(scope["method"], scope["path"])](request)
        except Exception as exc:
            # The app's handler for the nearest class, as Starlette's exception middleware
            # looks it up; the catch-all is the error middleware's, outside (above).
            cls = next(
                (
                    c
                    for c in type(exc).__mro__
                    if c in self.exception_handlers and c is not Exception
                ),
                None,
            )
            if cls is None:
                raise
            response = await _answer(self.exception_handlers[cls], request, exc)
        await response(scope, receive, send)


async def _answer(handler: Callable[..., Any], request: Request, exc: Exception) -> Response:
    answer = handler(request, exc)
    if inspect.isawaitable(answer):
        answer = await answer
    assert isinstance(answer, Response)
    return answer
